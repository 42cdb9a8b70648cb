package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/originweave/bap/server/internal/apigen"
)

// The spec is the wire, checked: every JSON response a test receives from the API (successes and
// problems alike) must validate against the schema the OpenAPI document gives its operation and
// status, in strict mode. Strict: an object schema that does not say what else it admits
// (additionalProperties or unevaluatedProperties) admits nothing else, so a handler that adds a
// field the spec does not declare fails every test that reads it. SDKs are generated from the
// spec; an undeclared field is one their users cannot see, and a missing one breaks them.

const bundleURL = "https://bap.invalid/openapi.gen.json"

type route struct {
	method   string
	re       *regexp.Regexp
	literals int    // literal segments: /tasks/secrets is tried before /tasks/{id}
	pointer  string // the operation's JSON pointer in the bundle
	op       map[string]any
}

var (
	specOnce   sync.Once
	specErr    error
	specRoutes []route
	specDoc    map[string]any
	specComp   *jsonschema.Compiler
	specMu     sync.Mutex
	specCache  = map[string]*jsonschema.Schema{}
)

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

func loadSpecRoutes() {
	var doc map[string]any
	if specErr = json.Unmarshal(apigen.OpenAPI, &doc); specErr != nil {
		return
	}
	comps, _ := doc["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	for _, s := range schemas {
		if m, ok := s.(map[string]any); ok {
			strict(m)
		}
	}
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
			specRoutes = append(specRoutes, route{method: strings.ToUpper(method), re: regexp.MustCompile(re.String()), literals: literals, pointer: ptr, op: m})
		}
	}
	sort.Slice(specRoutes, func(i, j int) bool { return specRoutes[i].literals > specRoutes[j].literals })
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	raw, err := json.Marshal(doc)
	if err != nil {
		specErr = err
		return
	}
	res, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		specErr = err
		return
	}
	if specErr = c.AddResource(bundleURL, res); specErr != nil {
		return
	}
	specDoc, specComp = doc, c
}

// responseSchema compiles the schema of (method, path)'s answer with status and media type; nil
// when the spec gives none (not an API route, or not JSON).
func responseSchema(method, path string, status int, mediaType string) (*jsonschema.Schema, string, error) {
	specOnce.Do(loadSpecRoutes)
	if specErr != nil {
		return nil, "", specErr
	}
	var rt *route
	for i := range specRoutes {
		if specRoutes[i].method == method && specRoutes[i].re.MatchString(path) {
			rt = &specRoutes[i]
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
		comps, _ := specDoc["components"].(map[string]any)
		rs, _ := comps["responses"].(map[string]any)
		if resp, ok = rs[name].(map[string]any); !ok {
			return nil, "", fmt.Errorf("no response %s in the spec", ref)
		}
	}
	content, _ := resp["content"].(map[string]any)
	if _, ok := content[mediaType]; !ok {
		if len(content) == 0 {
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("%s %s answered %d as %s, which the spec does not list (%v)", method, path, status, mediaType, keys(content))
	}
	loc := bundleURL + ptr + "/content/" + strings.ReplaceAll(mediaType, "/", "~1") + "/schema"
	specMu.Lock()
	defer specMu.Unlock()
	if s, ok := specCache[loc]; ok {
		return s, fmt.Sprint(rt.op["operationId"]), nil
	}
	s, err := specComp.Compile(loc)
	if err != nil {
		return nil, "", err
	}
	specCache[loc] = s
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

// assertResponseMatchesSpec fails t when a JSON answer of the API does not validate, strictly,
// against the schema the spec gives its operation and status.
func assertResponseMatchesSpec(t *testing.T, method, path string, status int, contentType string, raw []byte) {
	t.Helper()
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || (mt != "application/json" && mt != "application/problem+json") {
		return // artifacts, event streams, HTML: not JSON bodies
	}
	s, op, err := responseSchema(method, path, status, mt)
	if err != nil {
		t.Errorf("response of %s %s: %v", method, path, err)
		return
	}
	if s == nil {
		return
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Errorf("%s (%s %s) answered %d with a body that is not JSON: %v", op, method, path, status, err)
		return
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("%s (%s %s) answered %d with a body its schema does not admit: %v\nbody: %s", op, method, path, status, err, raw)
	}
}
