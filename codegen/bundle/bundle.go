// Package bundle turns spec/ (an OpenAPI or AsyncAPI YAML document whose schemas live in
// spec/schemas/*.json) into one self-contained JSON document: every file reference becomes a
// `#/components/schemas/<Name>` reference and every referenced schema file is copied into
// components.schemas. Tools that cannot follow external references (oapi-codegen, the request
// validator, clients fetching /bap/v1/openapi.json) read the bundle.
package bundle

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Document bundles the YAML document at docPath inside fsys, whose schema files live in the
// directory schemaDir (relative to fsys root). It returns indented JSON with sorted keys.
func Document(fsys fs.FS, docPath, schemaDir string) ([]byte, error) {
	raw, err := fs.ReadFile(fsys, docPath)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", docPath, err)
	}
	doc, err = normalise(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", docPath, err)
	}
	b := &bundler{fsys: fsys, dir: schemaDir, schemas: map[string]any{}}
	// Every schema file is included, referenced or not, so the bundle is the whole vocabulary.
	entries, err := fs.ReadDir(fsys, schemaDir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			if err := b.load(strings.TrimSuffix(e.Name(), ".json")); err != nil {
				return nil, err
			}
		}
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: not a mapping", docPath)
	}
	top = b.rewrite(top, true).(map[string]any)
	if b.err != nil {
		return nil, b.err
	}
	comps, _ := top["components"].(map[string]any)
	if comps == nil {
		comps = map[string]any{}
		top["components"] = comps
	}
	schemas, _ := comps["schemas"].(map[string]any)
	if schemas == nil {
		schemas = map[string]any{}
	}
	names := make([]string, 0, len(b.schemas))
	for n := range b.schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		// A components entry that was only a $ref to its own file is replaced by the file's content.
		if ref, ok := schemas[n].(map[string]any); ok && len(ref) == 1 && ref["$ref"] == "#/components/schemas/"+n {
			delete(schemas, n)
		}
		if _, exists := schemas[n]; !exists {
			schemas[n] = b.schemas[n]
		}
	}
	comps["schemas"] = schemas
	out, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

type bundler struct {
	fsys    fs.FS
	dir     string
	schemas map[string]any
	err     error
}

func (b *bundler) load(name string) error {
	if _, ok := b.schemas[name]; ok {
		return nil
	}
	raw, err := fs.ReadFile(b.fsys, path.Join(b.dir, name+".json"))
	if err != nil {
		return fmt.Errorf("schema %s: %w", name, err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("schema %s: %w", name, err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("schema %s: not an object", name)
	}
	// $id would re-base references inside the bundle; $schema is implied by OpenAPI 3.1.
	delete(m, "$id")
	delete(m, "$schema")
	b.schemas[name] = nil // mark before rewriting: schemas may refer to each other in cycles
	b.schemas[name] = b.rewrite(m, false)
	return b.err
}

// rewrite replaces file references with component references. In the top document references are
// relative to spec/ ("./schemas/X.json"); inside schema files they are siblings ("X.json").
func (b *bundler) rewrite(v any, top bool) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			if k == "$ref" {
				if s, ok := val.(string); ok {
					out[k] = b.ref(s, top)
					continue
				}
			}
			out[k] = b.rewrite(val, top)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = b.rewrite(e, top)
		}
		return out
	default:
		return v
	}
}

func (b *bundler) ref(s string, top bool) string {
	if strings.HasPrefix(s, "#") {
		return s
	}
	file, frag, _ := strings.Cut(s, "#")
	clean := path.Clean(file)
	if top {
		clean = strings.TrimPrefix(clean, b.dir+"/")
	}
	if strings.Contains(clean, "/") || !strings.HasSuffix(clean, ".json") {
		b.fail(fmt.Errorf("reference %q: only %s/<Name>.json files may be referenced", s, b.dir))
		return s
	}
	name := strings.TrimSuffix(clean, ".json")
	if err := b.load(name); err != nil {
		b.fail(err)
	}
	if frag != "" && frag != "/" {
		b.fail(fmt.Errorf("reference %q: fragments into schema files are not supported; give the type a file of its own", s))
	}
	return "#/components/schemas/" + name
}

func (b *bundler) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// normalise converts YAML-decoded values into JSON-compatible ones (string keys only).
func normalise(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			n, err := normalise(e)
			if err != nil {
				return nil, err
			}
			t[k] = n
		}
		return t, nil
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("non-string key %v", k)
			}
			n, err := normalise(e)
			if err != nil {
				return nil, err
			}
			out[ks] = n
		}
		return out, nil
	case []any:
		for i, e := range t {
			n, err := normalise(e)
			if err != nil {
				return nil, err
			}
			t[i] = n
		}
		return t, nil
	default:
		return v, nil
	}
}
