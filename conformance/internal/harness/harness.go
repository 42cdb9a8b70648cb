// Package harness is the scenario engine the Go conformance runners share (runner_go through
// sdk-go, runner_mcp through the official Go MCP client): it loads conformance/scenarios/*.json,
// substitutes variables and the fixture-pages origin, checks expectations, normalizes volatile
// values and writes the result file. The TypeScript and Python runners implement the same rules
// (conformance/README.md); the result files of all runners must be byte-identical.
package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Outcome is what one call answered, in runner-neutral terms.
type Outcome struct {
	// Status is "ok" for a successful call, the HTTP status (as a float64) of a problem.
	Status any
	// Code is the problem's code, or nil.
	Code any
	// Doc is the response body (or the problem document) as plain JSON values.
	Doc any
	// Err is a runner or transport error (the step records status "error").
	Err error
	// Body is the bytes of a binary answer (get_task_bundle's tar file), for verify_bundle.
	Body []byte
}

// Caller performs op with args (path/query parameters by name, "body") and the Idempotency-Key
// key ("" = let the client choose one).
type Caller func(ctx context.Context, op string, args map[string]any, key string) Outcome

// Setup prepares a Caller once the flags are parsed.
type Setup func(ctx context.Context, baseURL string) (Caller, func(), error)

type step struct {
	Op   string         `json:"op"`
	Args map[string]any `json:"args"`
	// As is "operator" for a step the local operator takes (OperatorCall), "" for the runner's
	// own client (the local agent).
	As     string            `json:"as"`
	Key    *string           `json:"key"`
	Expect expect            `json:"expect"`
	Save   map[string]string `json:"save"`
	// Until repeats the call (a read) until every pointer holds its value, for at most
	// untilTimeout: a replay task runs on a worker, and its end is what the step checks.
	Until map[string]any `json:"until"`
	// VerifyBundle, on get_task_bundle, has the auditor check the bytes the runner's client got
	// (VerifyBundle): the answer's document gains `verified`, the report.
	VerifyBundle bool `json:"verify_bundle"`
}

// untilTimeout bounds an `until` step; untilPause is the pause between its calls.
const (
	untilTimeout = 60 * time.Second
	untilPause   = 200 * time.Millisecond
)

type expect struct {
	Status any            `json:"status"`
	Code   *string        `json:"code"`
	Fields map[string]any `json:"fields"`
}

type scenario struct {
	Name  string `json:"name"`
	Steps []step `json:"steps"`
}

// PagesPlaceholder is replaced by the fixture pages' origin in scenario files, and the origin
// by it in results.
const PagesPlaceholder = "${PAGES}"

var (
	idRe   = regexp.MustCompile(`^(tsk|bs|ctx|ep|nd|apr|art|chk|cmd|rcp|evt|rec)_[A-Za-z0-9_-]+$`)
	hexRe  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	timeRe = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`)
)

// Pointer is RFC 6901; a missing member answers nil (recorded as null).
func Pointer(doc any, ptr string) any {
	if ptr == "" {
		return doc
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch v := cur.(type) {
		case map[string]any:
			x, ok := v[tok]
			if !ok {
				return nil
			}
			cur = x
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) {
				return nil
			}
			cur = v[i]
		default:
			return nil
		}
	}
	return cur
}

func subst(v any, vars map[string]any) (any, error) {
	switch x := v.(type) {
	case string:
		if strings.HasPrefix(x, "$") {
			if val, ok := vars[x[1:]]; ok {
				return val, nil
			}
			return nil, fmt.Errorf("unset variable %s", x)
		}
		return x, nil
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			s, err := subst(e, vars)
			if err != nil {
				return nil, err
			}
			out[k] = s
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			s, err := subst(e, vars)
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	}
	return v, nil
}

// normalize replaces, in every string: a saved variable's value by "$name" (names in sorted
// order); else an opaque id by "<id:prefix>", a SHA-256 hex digest by "<sha256>", an RFC 3339
// time by "<time>"; else each occurrence of the pages origin by "${PAGES}".
func normalize(v any, vars map[string]any, pages string) any {
	switch x := v.(type) {
	case string:
		names := make([]string, 0, len(vars))
		for n := range vars {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if s, ok := vars[n].(string); ok && s == x {
				return "$" + n
			}
		}
		if m := idRe.FindStringSubmatch(x); m != nil {
			return "<id:" + m[1] + ">"
		}
		if hexRe.MatchString(x) {
			return "<sha256>"
		}
		if timeRe.MatchString(x) {
			return "<time>"
		}
		if pages != "" {
			return strings.ReplaceAll(x, pages, PagesPlaceholder)
		}
		return x
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = normalize(e, vars, pages)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e, vars, pages)
		}
		return out
	}
	return v
}

func same(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// Generic turns a typed value into plain JSON values.
func Generic(v any) any {
	raw, err := json.Marshal(v)
	if err != nil {
		return map[string]any{}
	}
	return Decode(raw)
}

// OperatorCall takes a step as the local profile's operator: only the operator, on the server's
// Unix socket, resolves approvals (the runners' SDK clients and the MCP client on TCP are the
// agent). Every runner does it the same way, with the operator's own tool:
// `$CONFORMANCE_BAP approvals approve|deny ID [--reason R] [--idempotency-key K] --socket
// $CONFORMANCE_SOCKET`, whose stdout is the answer or the problem document (exit status 1).
func OperatorCall(ctx context.Context, op string, args map[string]any, key string) Outcome {
	bin, socket := os.Getenv("CONFORMANCE_BAP"), os.Getenv("CONFORMANCE_SOCKET")
	if bin == "" || socket == "" {
		return Outcome{Err: fmt.Errorf("an operator step needs CONFORMANCE_BAP and CONFORMANCE_SOCKET")}
	}
	body, _ := args["body"].(map[string]any)
	decision, _ := body["decision"].(string)
	id, _ := args["approval_id"].(string)
	if op != "resolve_approval" || (decision != "approve" && decision != "deny") || id == "" {
		return Outcome{Err: fmt.Errorf("the operator takes only resolve_approval steps with a decision, not %s", op)}
	}
	argv := []string{"approvals", decision, id, "--socket", socket}
	if r, ok := body["reason"].(string); ok {
		argv = append(argv, "--reason", r)
	}
	if key != "" {
		argv = append(argv, "--idempotency-key", key)
	}
	cmd := exec.CommandContext(ctx, bin, argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	doc := Decode(out)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return Outcome{Status: "ok", Doc: doc}
	case errors.As(err, &exit):
		p, _ := doc.(map[string]any)
		if status, ok := p["status"].(float64); ok {
			return Outcome{Status: status, Code: p["code"], Doc: doc}
		}
		return Outcome{Err: fmt.Errorf("bap approvals %s: %s", decision, strings.TrimSpace(stderr.String()))}
	default:
		return Outcome{Err: err}
	}
}

// VerifyBundle checks a bundle as an auditor does (ADR 0036), with the server's own tool:
// `$CONFORMANCE_BAP bundle verify FILE --jwks BASE/bap/v1/audit/keys`, whose stdout is the
// report (exit status 1 when it found a problem, still with the report).
func VerifyBundle(ctx context.Context, baseURL string, bundle []byte) (any, error) {
	bin := os.Getenv("CONFORMANCE_BAP")
	if bin == "" {
		return nil, errors.New("verify_bundle needs CONFORMANCE_BAP")
	}
	f, err := os.CreateTemp("", "conformance-bundle-*.tar")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(bundle); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "bundle", "verify", f.Name(), "--jwks", baseURL+"/bap/v1/audit/keys")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return nil, err
	}
	report, ok := Decode(out).(map[string]any)
	if !ok || report["valid"] == nil {
		return nil, fmt.Errorf("bap bundle verify: %s", strings.TrimSpace(stderr.String()))
	}
	return report, nil
}

// Decode parses raw JSON into plain values ({} when it is not JSON).
func Decode(raw []byte) any {
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		return map[string]any{}
	}
	return out
}

// holds reports whether every pointer of until holds its (substituted, normalized) value in doc.
func holds(doc any, until map[string]any, vars map[string]any, pages string) bool {
	for ptr, want := range until {
		w, err := subst(want, vars)
		if err != nil || !same(normalize(Pointer(doc, ptr), vars, pages), normalize(w, vars, pages)) {
			return false
		}
	}
	return true
}

func runScenario(ctx context.Context, call Caller, lang, baseURL string, sc scenario, nonce, pages string, errs *[]string) map[string]any {
	vars := map[string]any{}
	steps := []any{}
	ok := true
	for i, st := range sc.Steps {
		key := ""
		if st.Key != nil {
			key = fmt.Sprintf("conf-%s-%s-%s-%s", lang, nonce, sc.Name, *st.Key)
		}
		var o Outcome
		args, err := subst(map[string]any(st.Args), vars)
		if err != nil {
			o = Outcome{Err: err}
		} else {
			a, _ := args.(map[string]any)
			if a == nil {
				a = map[string]any{}
			}
			switch {
			case st.As == "operator":
				o = OperatorCall(ctx, st.Op, a, key)
			case len(st.Until) > 0:
				deadline := time.Now().Add(untilTimeout)
				for o = call(ctx, st.Op, a, key); o.Err == nil && !holds(o.Doc, st.Until, vars, pages) && time.Now().Before(deadline); {
					time.Sleep(untilPause)
					o = call(ctx, st.Op, a, key)
				}
			default:
				o = call(ctx, st.Op, a, key)
			}
			if st.VerifyBundle && o.Err == nil && o.Status == "ok" {
				if report, err := VerifyBundle(ctx, baseURL, o.Body); err != nil {
					o.Err = err
				} else if m, ok := o.Doc.(map[string]any); ok {
					m["verified"] = report
				}
			}
		}
		if o.Err != nil {
			o.Status, o.Code, o.Doc = "error", nil, map[string]any{}
			*errs = append(*errs, fmt.Sprintf("%s step %d: %v", sc.Name, i+1, o.Err))
		}
		if o.Doc == nil {
			o.Doc = map[string]any{}
		}
		fields := map[string]any{}
		for ptr := range st.Expect.Fields {
			fields[ptr] = Pointer(o.Doc, ptr)
		}
		got := normalize(fields, vars, pages).(map[string]any)
		var wantCode any
		if st.Expect.Code != nil {
			wantCode = *st.Expect.Code
		}
		passed := same(o.Status, st.Expect.Status) && same(o.Code, wantCode)
		for ptr, want := range st.Expect.Fields {
			w, err := subst(want, vars)
			if err != nil || !same(got[ptr], normalize(w, vars, pages)) {
				passed = false
			}
		}
		if !passed {
			f, _ := json.Marshal(got)
			e, _ := json.Marshal(st.Expect)
			*errs = append(*errs, fmt.Sprintf("%s step %d (%s): got status=%v code=%v fields=%s; want %s", sc.Name, i+1, st.Op, o.Status, o.Code, f, e))
		}
		// Saved after the checks: a step compares with what earlier steps saved.
		for name, ptr := range st.Save {
			if v := Pointer(o.Doc, ptr); v != nil {
				vars[name] = v
			}
		}
		ok = ok && passed
		steps = append(steps, map[string]any{"op": st.Op, "status": o.Status, "code": o.Code, "fields": got, "pass": passed})
		if o.Status == "error" {
			break
		}
	}
	return map[string]any{"name": sc.Name, "pass": ok, "steps": steps}
}

// Main parses the runner flags (--base-url, --out, --scenarios, --pages), runs every scenario
// through the Caller of setup and writes <out>/<lang>.json; it exits 1 when a step failed.
func Main(lang string, setup Setup) {
	baseURL := flag.String("base-url", "", "server base URL")
	out := flag.String("out", "", "output directory")
	dir := flag.String("scenarios", "conformance/scenarios", "scenario directory")
	pagesFlag := flag.String("pages", "", "origin of the fixture pages (default: $CONFORMANCE_PAGES)")
	flag.Parse()
	if *baseURL == "" || *out == "" {
		fmt.Fprintf(os.Stderr, "usage: runner_%s --base-url URL --out DIR [--scenarios DIR] [--pages ORIGIN]\n", lang)
		os.Exit(2)
	}
	pages := strings.TrimRight(*pagesFlag, "/")
	if pages == "" {
		pages = strings.TrimRight(os.Getenv("CONFORMANCE_PAGES"), "/")
	}
	nonce := os.Getenv("CONFORMANCE_RUN")
	if nonce == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		nonce = hex.EncodeToString(b)
	}
	files, _ := filepath.Glob(filepath.Join(*dir, "*.json"))
	sort.Strings(files)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	call, done, err := setup(ctx, strings.TrimRight(*baseURL, "/"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "conformance[%s]: %v\n", lang, err)
		os.Exit(1)
	}
	var errs []string
	results := []any{}
	passed := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if bytes.Contains(raw, []byte(PagesPlaceholder)) {
			if pages == "" {
				fmt.Fprintf(os.Stderr, "conformance[%s]: %s uses %s: pass --pages or set CONFORMANCE_PAGES\n", lang, f, PagesPlaceholder)
				os.Exit(2)
			}
			raw = bytes.ReplaceAll(raw, []byte(PagesPlaceholder), []byte(pages))
		}
		var sc scenario
		if err := json.Unmarshal(raw, &sc); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", f, err)
			os.Exit(1)
		}
		r := runScenario(ctx, call, lang, strings.TrimRight(*baseURL, "/"), sc, nonce, pages, &errs)
		if r["pass"] == true {
			passed++
		}
		results = append(results, r)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"scenarios": results}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(filepath.Join(*out, lang+".json"), buf.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, e := range errs {
		fmt.Fprintf(os.Stderr, "conformance[%s]: FAIL %s\n", lang, e)
	}
	fmt.Fprintf(os.Stderr, "conformance[%s]: %d/%d scenarios pass\n", lang, passed, len(results))
	done()
	if len(errs) > 0 {
		os.Exit(1)
	}
}
