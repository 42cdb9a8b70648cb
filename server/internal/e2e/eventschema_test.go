package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/originweave/bap/spec"
)

// Every event a test reads back must match the AsyncAPI contract: the Event envelope and, for its
// type, the <Type>Data schema (action.performed → ActionPerformedData.json). SDKs decode event data
// by these schemas, so a field the server forgets breaks their users.

const schemaBase = "https://bap.invalid/spec/schemas/"

var (
	eventSchemasOnce sync.Once
	eventCompiler    *jsonschema.Compiler
	eventSchemasErr  error
	eventSchemaMu    sync.Mutex
	eventSchemas     = map[string]*jsonschema.Schema{}
)

type noLoader struct{}

func (noLoader) Load(url string) (any, error) { return nil, fmt.Errorf("no loading of %s", url) }

func eventSchema(name string) (*jsonschema.Schema, error) {
	eventSchemasOnce.Do(func() {
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		c.UseLoader(noLoader{})
		files, err := fs.Glob(spec.FS, "schemas/*.json")
		if err != nil {
			eventSchemasErr = err
			return
		}
		for _, f := range files {
			b, err := fs.ReadFile(spec.FS, f)
			if err != nil {
				eventSchemasErr = err
				return
			}
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
			if err != nil {
				eventSchemasErr = fmt.Errorf("%s: %w", f, err)
				return
			}
			if err := c.AddResource(schemaBase+strings.TrimPrefix(f, "schemas/"), doc); err != nil {
				eventSchemasErr = err
				return
			}
		}
		eventCompiler = c
	})
	if eventSchemasErr != nil {
		return nil, eventSchemasErr
	}
	eventSchemaMu.Lock()
	defer eventSchemaMu.Unlock()
	if s, ok := eventSchemas[name]; ok {
		return s, nil
	}
	s, err := eventCompiler.Compile(schemaBase + name + ".json")
	if err != nil {
		return nil, err
	}
	eventSchemas[name] = s
	return s, nil
}

// dataSchemaName maps an event type to its data schema: task.state_changed → TaskStateChangedData.
func dataSchemaName(typ string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(typ, func(r rune) bool { return r == '.' || r == '_' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String() + "Data"
}

// assertEventsMatchSchemas checks a list_task_events answer.
func assertEventsMatchSchemas(t *testing.T, raw []byte) {
	t.Helper()
	var page struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		t.Fatalf("events page: %v", err)
	}
	envelope, err := eventSchema("Event")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page.Events {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(e)))
		if err != nil {
			t.Fatal(err)
		}
		if err := envelope.Validate(doc); err != nil {
			t.Errorf("event does not match Event.json: %v\n%s", err, e)
			continue
		}
		var ev struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		_ = json.Unmarshal(e, &ev)
		s, err := eventSchema(dataSchemaName(ev.Type))
		if err != nil {
			t.Errorf("event type %s has no data schema: %v", ev.Type, err)
			continue
		}
		data, _ := jsonschema.UnmarshalJSON(strings.NewReader(string(ev.Data)))
		if err := s.Validate(data); err != nil {
			t.Errorf("%s data does not match %s: %v\n%s", ev.Type, dataSchemaName(ev.Type), err, ev.Data)
		}
	}
}
