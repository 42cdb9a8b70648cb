// Package spectest checks, for tests, that the API's answers are what the spec says: every JSON
// response (successes and problems alike) must validate against the schema the OpenAPI bundle
// gives its operation and status, in strict mode. Strict: an object schema that does not say what
// else it admits (additionalProperties or unevaluatedProperties) admits nothing else, so a handler
// that adds a field the spec does not declare fails every test that reads it. The SDKs are
// generated from the spec; an undeclared field is one their users cannot see, and a missing one
// breaks them.
//
// Only _test.go files import it (archtest says so).
package spectest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const bundleURL = "https://bap.invalid/openapi.gen.json"

type route struct {
	method   string
	re       *regexp.Regexp
	literals int    // literal segments: /tasks/secrets is tried before /tasks/{id}
	pointer  string // the operation's JSON pointer in the bundle
	op       map[string]any
}

// Responses validates answers against one OpenAPI bundle. It is safe for concurrent use.
type Responses struct {
	routes []route
	doc    map[string]any
	comp   *jsonschema.Compiler
	mu     sync.Mutex
	cache  map[string]*jsonschema.Schema
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) { return nil, fmt.Errorf("no loading of %s", url) }

// New reads a bundled OpenAPI document (apigen.OpenAPI) and makes its object schemas strict.
func New(bundle []byte) (*Responses, error) {
	var doc map[string]any
	if err := json.Unmarshal(bundle, &doc); err != nil {
		return nil, fmt.Errorf("spectest: reading the bundle: %w", err)
	}
	comps, _ := doc["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	for _, s := range schemas {
		if m, ok := s.(map[string]any); ok {
			strict(m)
		}
	}
	r := &Responses{doc: doc, cache: map[string]*jsonschema.Schema{}}
	paths, _ := doc["paths"].(map[string]any)
	for tmpl, item := range paths {
		ops, _ := item.(map[string]any)
		var re strings.Builder
		re.WriteString("^")
		literals := 0
		for _, seg := range strings.Split(strings.TrimPrefix(tmpl, "/"), "/") {
			re.WriteString("/")
			if strings.HasPrefix(seg, "{") {
				re.WriteString("[^/]+")
			} else {
				re.WriteString(regexp.QuoteMeta(seg))
				literals++
			}
		}
		re.WriteString("$")
		for method, op := range ops {
			m, ok := op.(map[string]any)
			if !ok || method == "parameters" {
				continue
			}
			ptr := "#/paths/" + strings.ReplaceAll(strings.ReplaceAll(tmpl, "~", "~0"), "/", "~1") + "/" + method
			r.routes = append(r.routes, route{method: strings.ToUpper(method), re: regexp.MustCompile(re.String()), literals: literals, pointer: ptr, op: m})
		}
	}
	sort.SliceStable(r.routes, func(i, j int) bool { return r.routes[i].literals > r.routes[j].literals })
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	res, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	if err := c.AddResource(bundleURL, res); err != nil {
		return nil, err
	}
	r.comp = c
	return r, nil
}

// strict adds unevaluatedProperties: false to s, and to the object schemas nested in its
// properties and items, wherever none says what else is admitted. The members of allOf, oneOf,
// anyOf and if/then/else are left alone: they are parts of the object their parent describes
// (unevaluatedProperties there would refuse the other parts' properties).
func strict(s map[string]any) {
	if _, ok := s["$ref"]; ok {
		return
	}
	_, hasProps := s["properties"]
	typ, _ := s["type"].(string)
	if hasProps || typ == "object" {
		_, ap := s["additionalProperties"]
		_, up := s["unevaluatedProperties"]
		if !ap && !up {
			s["unevaluatedProperties"] = false
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for _, p := range props {
			if m, ok := p.(map[string]any); ok {
				strict(m)
			}
		}
	}
	if m, ok := s["items"].(map[string]any); ok {
		strict(m)
	}
	if m, ok := s["additionalProperties"].(map[string]any); ok {
		strict(m)
	}
}

// schema compiles the schema of (method, path)'s answer with status and media type; nil when
// the spec gives none (not an API route, or not JSON).
func (r *Responses) schema(method, path string, status int, mediaType string) (*jsonschema.Schema, string, error) {
	var rt *route
	for i := range r.routes {
		if r.routes[i].method == method && r.routes[i].re.MatchString(path) {
			rt = &r.routes[i]
			break
		}
	}
	if rt == nil {
		return nil, "", nil
	}
	responses, _ := rt.op["responses"].(map[string]any)
	key := strconv.Itoa(status)
	resp, ok := responses[key].(map[string]any)
	if !ok {
		key = "default"
		if resp, ok = responses[key].(map[string]any); !ok {
			return nil, "", fmt.Errorf("%s %s answered %d, a status the spec does not list for %s", method, path, status, rt.op["operationId"])
		}
	}
	ptr := rt.pointer + "/responses/" + key
	if ref, ok := resp["$ref"].(string); ok {
		ptr = ref
		name := ref[strings.LastIndexByte(ref, '/')+1:]
		comps, _ := r.doc["components"].(map[string]any)
		rs, _ := comps["responses"].(map[string]any)
		if resp, ok = rs[name].(map[string]any); !ok {
			return nil, "", fmt.Errorf("no response %s in the spec", ref)
		}
	}
	content, _ := resp["content"].(map[string]any)
	if _, ok := content[mediaType]; !ok {
		if _, bytes := content["*/*"]; bytes || len(content) == 0 {
			return nil, "", nil // bytes of any type (an artifact): nothing to validate
		}
		return nil, "", fmt.Errorf("%s %s answered %d as %s, which the spec does not list (%v)", method, path, status, mediaType, keys(content))
	}
	s, err := r.compile(bundleURL + ptr + "/content/" + strings.ReplaceAll(mediaType, "/", "~1") + "/schema")
	if err != nil {
		return nil, "", err
	}
	return s, fmt.Sprint(rt.op["operationId"]), nil
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Check returns an error when a JSON answer of the API to (method, path) does not validate,
// strictly, against the schema the spec gives its operation and status. Answers that are not
// JSON (artifacts, event streams, HTML) and routes outside the spec (/mcp, /console, OAuth) pass.
func (r *Responses) Check(method, path string, status int, contentType string, raw []byte) error {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || (mt != "application/json" && mt != "application/problem+json") {
		return nil
	}
	s, op, err := r.schema(method, path, status, mt)
	if err != nil {
		return fmt.Errorf("response of %s %s: %w", method, path, err)
	}
	if s == nil {
		return nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("%s (%s %s) answered %d with a body that is not JSON: %w", op, method, path, status, err)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("%s (%s %s) answered %d with a body its schema does not admit: %w\nbody: %s", op, method, path, status, err, raw)
	}
	return nil
}

// Transport wraps base (http.DefaultTransport when nil) so that every JSON answer it carries is
// checked; a violation goes to report, and the body is handed on unchanged.
func (r *Responses) Transport(base http.RoundTripper, report func(error)) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return checking{r: r, base: base, report: report}
}

type checking struct {
	r      *Responses
	base   http.RoundTripper
	report func(error)
}

func (c checking) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/json" && mt != "application/problem+json" {
		return resp, nil // streams and bytes pass untouched (and unbuffered)
	}
	raw, rerr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if rerr != nil {
		return resp, nil // the caller sees the short body and its own error handling applies
	}
	if err := c.r.Check(req.Method, req.URL.Path, resp.StatusCode, resp.Header.Get("Content-Type"), raw); err != nil {
		c.report(err)
	}
	return resp, nil
}

// compile compiles (once) the schema at loc.
func (r *Responses) compile(loc string) (*jsonschema.Schema, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.cache[loc]; ok {
		return s, nil
	}
	s, err := r.comp.Compile(loc)
	if err != nil {
		return nil, err
	}
	r.cache[loc] = s
	return s, nil
}
