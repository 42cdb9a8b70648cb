// Command runner_go is the conformance runner for sdk-go: it runs every
// conformance/scenarios/*.json against a live server and writes <out>/go.json
// (normalized results, see conformance/README.md); it exits 1 when a step fails.
//
//	go run ./conformance/runner_go --base-url http://127.0.0.1:PORT --out DIR
package main

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
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	bap "github.com/originweave/bap/sdk-go"
)

const lang = "go"

type step struct {
	Op     string            `json:"op"`
	Args   map[string]any    `json:"args"`
	Key    *string           `json:"key"`
	Expect expect            `json:"expect"`
	Save   map[string]string `json:"save"`
}

type expect struct {
	Status any            `json:"status"`
	Code   *string        `json:"code"`
	Fields map[string]any `json:"fields"`
}

type scenario struct {
	Name  string `json:"name"`
	Steps []step `json:"steps"`
}

// typed decodes the scenario body into the SDK's request type; a field the type does not know is
// a runner error (the fixture would not be expressible through sdk-go).
func typed[T any](args map[string]any) (T, error) {
	var v T
	b, ok := args["body"]
	if !ok || b == nil {
		return v, nil
	}
	raw, _ := json.Marshal(b)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, fmt.Errorf("body not expressible as %T: %w", v, err)
	}
	return v, nil
}

func str(args map[string]any, k string) string { s, _ := args[k].(string); return s }
func num(args map[string]any, k string) int    { f, _ := args[k].(float64); return int(f) }

func call(ctx context.Context, c *bap.Client, op string, args map[string]any, opts []bap.CallOption) (any, error) {
	switch op {
	case "create_task":
		b, err := typed[bap.CreateTaskRequest](args)
		if err != nil {
			return nil, err
		}
		return c.CreateTask(ctx, b, opts...)
	case "get_task":
		return c.GetTask(ctx, str(args, "task_id"))
	case "cancel_task":
		b, err := typed[bap.CancelTaskRequest](args)
		if err != nil {
			return nil, err
		}
		return c.CancelTask(ctx, str(args, "task_id"), b, opts...)
	case "close_task":
		b, err := typed[bap.CloseTaskRequest](args)
		if err != nil {
			return nil, err
		}
		return c.CloseTask(ctx, str(args, "task_id"), b, opts...)
	case "request_approval":
		b, err := typed[bap.RequestApprovalRequest](args)
		if err != nil {
			return nil, err
		}
		return c.RequestApproval(ctx, str(args, "task_id"), b, opts...)
	case "resolve_approval":
		b, err := typed[bap.ResolveApprovalRequest](args)
		if err != nil {
			return nil, err
		}
		return c.ResolveApproval(ctx, str(args, "approval_id"), b, opts...)
	case "list_task_events":
		return c.ListTaskEvents(ctx, str(args, "task_id"), num(args, "after"), num(args, "limit"))
	}
	return nil, fmt.Errorf("unknown op %s", op)
}

// pointer is RFC 6901; a missing member answers nil (recorded as null).
func pointer(doc any, ptr string) any {
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

func normalize(v any, vars map[string]any) any {
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
		return x
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = normalize(e, vars)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e, vars)
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

// generic turns a typed response into plain JSON values.
func generic(v any) any {
	raw, err := json.Marshal(v)
	if err != nil {
		return map[string]any{}
	}
	var out any
	_ = json.Unmarshal(raw, &out)
	return out
}

func runScenario(ctx context.Context, c *bap.Client, sc scenario, nonce string, errs *[]string) map[string]any {
	vars := map[string]any{}
	steps := []any{}
	ok := true
	for i, st := range sc.Steps {
		var opts []bap.CallOption
		if st.Key != nil {
			opts = append(opts, bap.WithIdempotencyKey(fmt.Sprintf("conf-%s-%s-%s-%s", lang, nonce, sc.Name, *st.Key)))
		}
		var status any = "ok"
		var code any
		var doc any = map[string]any{}
		args, err := subst(map[string]any(st.Args), vars)
		var resp any
		if err == nil {
			if args == nil {
				args = map[string]any{}
			}
			resp, err = call(ctx, c, st.Op, args.(map[string]any), opts)
		}
		var p *bap.Problem
		switch {
		case errors.As(err, &p):
			status = float64(p.Status)
			if p.Code != "" {
				code = string(p.Code)
			}
			if err := json.Unmarshal(p.Body, &doc); err != nil {
				doc = map[string]any{}
			}
		case err != nil:
			status = "error"
			*errs = append(*errs, fmt.Sprintf("%s step %d: %v", sc.Name, i+1, err))
		default:
			doc = generic(resp)
		}
		for name, ptr := range st.Save {
			if v := pointer(doc, ptr); v != nil {
				vars[name] = v
			}
		}
		fields := map[string]any{}
		for ptr := range st.Expect.Fields {
			fields[ptr] = pointer(doc, ptr)
		}
		var wantCode any
		if st.Expect.Code != nil {
			wantCode = *st.Expect.Code
		}
		passed := same(status, st.Expect.Status) && same(code, wantCode)
		for ptr, want := range st.Expect.Fields {
			w, err := subst(want, vars)
			if err != nil || !same(fields[ptr], w) {
				passed = false
			}
		}
		if !passed {
			f, _ := json.Marshal(fields)
			e, _ := json.Marshal(st.Expect)
			*errs = append(*errs, fmt.Sprintf("%s step %d (%s): got status=%v code=%v fields=%s; want %s", sc.Name, i+1, st.Op, status, code, f, e))
		}
		ok = ok && passed
		steps = append(steps, map[string]any{"op": st.Op, "status": status, "code": code, "fields": normalize(fields, vars), "pass": passed})
		if status == "error" {
			break
		}
	}
	return map[string]any{"name": sc.Name, "pass": ok, "steps": steps}
}

func main() {
	baseURL := flag.String("base-url", "", "server base URL")
	out := flag.String("out", "", "output directory")
	dir := flag.String("scenarios", "conformance/scenarios", "scenario directory")
	flag.Parse()
	if *baseURL == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: runner_go --base-url URL --out DIR [--scenarios DIR]")
		os.Exit(2)
	}
	nonce := os.Getenv("CONFORMANCE_RUN")
	if nonce == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		nonce = hex.EncodeToString(b)
	}
	files, _ := filepath.Glob(filepath.Join(*dir, "*.json"))
	sort.Strings(files)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := bap.NewClient(*baseURL)
	var errs []string
	results := []any{}
	passed := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var sc scenario
		if err := json.Unmarshal(raw, &sc); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", f, err)
			os.Exit(1)
		}
		r := runScenario(ctx, c, sc, nonce, &errs)
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
	if len(errs) > 0 {
		os.Exit(1)
	}
}
