package schemaextract

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/page"
)

// doc is what a page offers the finder: the values of the matches of each query, by the query's
// label, name or text.
type doc map[string][]any

// finder answers a query from d (its label, else its name, else its text), at most limit
// values, and records the queries it was asked.
func (d doc) finder(asked *[]page.Query) Find {
	return func(_ context.Context, q page.Query, limit int) ([]any, error) {
		*asked = append(*asked, q)
		key := q.Label
		if key == "" {
			key = q.Name
		}
		if key == "" {
			key = q.Text
		}
		vs := d[key]
		if len(vs) > limit {
			vs = vs[:limit]
		}
		return vs, nil
	}
}

func TestExtract(t *testing.T) {
	page1 := doc{"Full name": {"Ada"}, "$31.50": {"$31.50"}, "Terms": {true}, "$": {"$12.00", "$19.50", "n/a"},
		"Quantity": {"3 items"}, "Items": {"2.0"}, "Subscribed": {"yes"}, "Gift": {"Off"}, "Shown": {false}, "Note": {"x"},
		"Total": {"n/a"}, "Count": {"1.5"}, "Nothing": {"maybe"}, "Shipping": {"Fast"}}
	cases := []struct {
		name   string
		schema string
		fields map[string]page.Query
		want   map[string]any // the result, or the data of the schema error when invalid
		asked  int            // queries asked, 0: not checked
		inval  bool           // the data does not satisfy the schema
	}{
		{"mapped fields, converted", `{"type":"object","required":["name","total","terms"],"properties":{
			"name":{"type":"string","minLength":1},"total":{"type":"number"},"terms":{"type":"boolean"},
			"prices":{"type":"array","items":{"type":"number"}}}}`,
			map[string]page.Query{"name": {Label: "Full name"}, "total": {Text: "$31.50", Exact: true}, "terms": {Label: "Terms"}, "prices": {Text: "$"}},
			map[string]any{"name": "Ada", "total": 31.5, "terms": true, "prices": []any{12.0, 19.5, "n/a"}}, 4, true}, // "n/a" is no number
		{"integers, booleans and strings", `{"type":"object","properties":{"qty":{"type":"integer"},"items":{"type":["null","integer"]},
			"sub":{"type":"boolean"},"gift":{"type":"boolean"},"shown":{"type":"string"},"note":{"type":"string"},"count":{"type":"integer"},
			"nothing":{"type":"boolean"},"total":{"type":"number"},"terms":{"type":"integer"},"ship":{"type":"string"}}}`,
			map[string]page.Query{"qty": {Label: "Quantity"}, "items": {Label: "Items"}, "sub": {Label: "Subscribed"}, "gift": {Label: "Gift"},
				"shown": {Label: "Shown"}, "note": {Label: "Note"}, "count": {Label: "Count"}, "nothing": {Label: "Nothing"},
				"total": {Label: "Total"}, "terms": {Label: "Terms"}, "ship": {Label: "Shipping"}},
			map[string]any{"qty": int64(3), "items": int64(2), "sub": true, "gift": false, "shown": "false", "note": "x",
				"count": "1.5", "nothing": "maybe", "total": "n/a", "terms": true, "ship": "Fast"}, 0, true}, // what does not convert stays
		{"by title, then by name", `{"type":"object","properties":{"who":{"type":"string","title":"Full name"},
			"Shipping":{"type":"string"},"absent":{"title":"No such label"},"odd":true}}`, nil,
			map[string]any{"who": "Ada", "Shipping": "Fast"}, 6, false},
		{"an untyped array property", `{"type":"object","properties":{"p":{"type":"array"}}}`,
			map[string]page.Query{"p": {Text: "$"}}, map[string]any{"p": []any{"$12.00", "$19.50", "n/a"}}, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var asked []page.Query
			got, err := Extract(context.Background(), []byte(c.schema), c.fields, page1.finder(&asked))
			if c.inval {
				var e *Error
				if !errors.As(err, &e) || !errors.Is(err, page.ErrInvalidRequest) || !reflect.DeepEqual(e.Data, c.want) || !strings.HasPrefix(e.Error(), "schema extract: ") {
					t.Fatalf("got %#v, %v; want a schema error with data %#v", got, err, c.want)
				}
			} else if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %#v, %v; want %#v", got, err, c.want)
			}
			if c.asked != 0 && len(asked) != c.asked {
				t.Fatalf("asked %d queries (%+v), want %d", len(asked), asked, c.asked)
			}
		})
	}
}

func TestExtractRefusals(t *testing.T) {
	boom := errors.New("the page went away")
	failing := func(context.Context, page.Query, int) ([]any, error) { return nil, boom }
	var calls int
	failSecond := func(_ context.Context, q page.Query, _ int) ([]any, error) {
		calls++
		if calls > 1 {
			return nil, boom
		}
		return nil, nil
	}
	none := func(context.Context, page.Query, int) ([]any, error) { return nil, nil }
	cases := []struct {
		name   string
		schema string
		fields map[string]page.Query
		find   Find
		schErr bool  // a *Error
		is     error // else errors.Is
	}{
		{"no schema", ``, nil, none, false, page.ErrInvalidRequest},
		{"not JSON", `{`, nil, none, true, nil},
		{"a file reference", `{"$ref":"file:///etc/passwd"}`, map[string]page.Query{"x": {Label: "a"}}, none, true, nil},
		{"an invalid schema", `{"type":7}`, nil, none, true, nil},
		{"no fields and no properties", `{"type":"object"}`, nil, none, false, page.ErrInvalidRequest},
		{"a query naming nothing", `{"type":"object"}`, map[string]page.Query{"x": {}}, none, false, page.ErrInvalidRequest},
		{"the finder fails", `{"type":"object"}`, map[string]page.Query{"x": {Label: "a"}}, failing, false, boom},
		{"the finder fails by name", `{"properties":{"x":{}}}`, nil, failSecond, false, boom},
		{"required and absent", `{"type":"object","required":["x"]}`, map[string]page.Query{"x": {Label: "a"}}, none, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls = 0
			_, err := Extract(context.Background(), []byte(c.schema), c.fields, c.find)
			var e *Error
			switch {
			case err == nil:
				t.Fatal("no error")
			case c.schErr && !errors.As(err, &e):
				t.Fatalf("%v, want a schema error", err)
			case !c.schErr && !errors.Is(err, c.is):
				t.Fatalf("%v, want %v", err, c.is)
			}
			if c.name == "a file reference" && !strings.Contains(err.Error(), "schema references are not loaded") {
				t.Fatalf("a reference was not refused by the loader: %v", err)
			}
		})
	}
}
