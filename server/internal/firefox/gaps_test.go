package firefox

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/schemaextract"
	"github.com/originweave/bap/server/internal/waitfor"
)

// What the Firefox adapter once refused as not supported on its engine and now answers as the CDP
// adapter does: extract kind schema, select_option on a component that is not a <select>, and
// filling a secret_ref.

const schemaPage = `<!doctype html><title>Basket</title><h1>Basket</h1>
<label for="n">Full name</label><input id="n" name="name">
<label><input type="checkbox" name="terms"> I accept the terms</label>
<p>Tea $12.00</p><p>Cake $19.50</p><p id="total">$31.50</p>`

// TestPortExtractSchema: a schema extract reads each field's best match (a text box's value, a
// checkbox's state, a text), converts it to the property's type and validates the result; an
// array property collects every match; data that does not satisfy the schema and a schema that
// references a file answer a schema error (an invalid_request), as on Chromium.
func TestPortExtractSchema(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := servePage(t, schemaPage)
	s := portSession(t, ctx, &events{}, srv.URL)
	nav, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Act(ctx, page.ActRequest{Action: page.ActionFill, Query: &page.Query{Label: "Full name"}, Value: "Ada"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Act(ctx, page.ActRequest{Action: page.ActionCheck, Query: &page.Query{Label: "I accept the terms"}}); err != nil {
		t.Fatal(err)
	}
	schema := json.RawMessage(`{"type":"object","required":["name","total","terms"],"properties":{
		"name":{"type":"string","minLength":1},"total":{"type":"number"},"terms":{"type":"boolean"},
		"prices":{"type":"array","items":{"type":"string"}}}}`)
	res, err := s.Extract(ctx, page.ExtractRequest{Kind: page.ExtractSchema, Schema: schema, Fields: map[string]page.Query{
		"name": {Label: "Full name"}, "total": {Text: "$31.50", Exact: true}, "terms": {Label: "I accept the terms"},
		"prices": {Text: "$"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := res.Data.(map[string]any)
	prices, _ := data["prices"].([]any)
	if data["name"] != "Ada" || data["total"] != 31.5 || data["terms"] != true || len(prices) != 3 || res.EpochID != nav.EpochID {
		t.Fatalf("schema data %#v (epoch %s, navigated to %s)", res.Data, res.EpochID, nav.EpochID)
	}
	// Without fields, each property is looked up by its title as a label.
	res, err = s.Extract(ctx, page.ExtractRequest{Kind: page.ExtractSchema,
		Schema: json.RawMessage(`{"type":"object","properties":{"who":{"type":"string","title":"Full name"}}}`)})
	if err != nil || res.Data.(map[string]any)["who"] != "Ada" {
		t.Fatalf("schema extract by title: %#v %v", res, err)
	}
	var se *schemaextract.Error
	_, err = s.Extract(ctx, page.ExtractRequest{Kind: page.ExtractSchema, Schema: json.RawMessage(`{"type":"object","required":["missing"]}`),
		Fields: map[string]page.Query{"missing": {Label: "No such label"}}})
	if !errors.As(err, &se) || !errors.Is(err, page.ErrInvalidRequest) || se.Data == nil {
		t.Fatalf("data that does not satisfy the schema: %v", err)
	}
	_, err = s.Extract(ctx, page.ExtractRequest{Kind: page.ExtractSchema, Schema: json.RawMessage(`{"$ref":"file:///etc/passwd"}`),
		Fields: map[string]page.Query{"x": {Label: "Full name"}}})
	if !errors.As(err, &se) || strings.Contains(err.Error(), "root:") {
		t.Fatalf("a schema with a file reference: %v", err)
	}
}

// A custom select as component libraries build one: a combobox whose listbox of options opens on
// a click (the options are not in the page before).
const customSelectPage = `<!doctype html><title>Widgets</title><p id="log">log:</p>
<div id="cb" role="combobox" tabindex="0" aria-label="Country" aria-expanded="false" style="border:1px solid;padding:4px;width:10em">Choose…</div>
<div id="lb" role="listbox" aria-label="Countries"></div>
<script>
const cb = document.getElementById('cb'), lb = document.getElementById('lb');
cb.addEventListener('click', () => {
  if (lb.childElementCount) return;
  cb.setAttribute('aria-expanded', 'true');
  for (const [v, n, dis] of [['fr', 'France', false], ['jp', 'Japan', false], ['xx', 'Atlantis', true]]) {
    const o = document.createElement('div');
    o.setAttribute('role', 'option'); o.textContent = n; o.dataset.v = v;
    if (dis) o.setAttribute('aria-disabled', 'true');
    o.style.padding = '4px';
    o.addEventListener('click', () => {
      if (o.getAttribute('aria-disabled')) return;
      document.getElementById('log').textContent += ' country=' + v + ';';
      cb.textContent = n; cb.setAttribute('aria-expanded', 'false'); lb.replaceChildren();
    });
    lb.append(o);
  }
});
</script>`

// TestPortSelectCustom: select_option on a combobox that is not a <select> opens it with a click
// and clicks the option of that name, for each value in turn (as on Chromium); a value no
// enabled option has is an invalid_request naming it.
func TestPortSelectCustom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := servePage(t, customSelectPage)
	s := portSession(t, ctx, &events{}, srv.URL)
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	logText := func() string {
		var r struct {
			V string `json:"v"`
		}
		if err := s.Agent(ctx, &r, "visibleText", 0); err != nil {
			t.Fatal(err)
		}
		return r.V
	}
	combo := &page.Query{Role: "combobox", Name: "Country"}
	if _, err := s.Act(ctx, page.ActRequest{Action: page.ActionSelectOption, Query: combo, Value: "Japan"}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "the option's click", func() (bool, string) {
		txt := logText()
		return strings.Contains(txt, "country=jp;"), txt
	})
	if _, err := s.Act(ctx, page.ActRequest{Action: page.ActionSelectOption, Query: combo, Values: []string{"france", "Japan"}}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "both options' clicks", func() (bool, string) {
		txt := logText()
		return strings.Contains(txt, "country=jp; country=fr; country=jp;"), txt
	})
	_, err := s.Act(ctx, page.ActRequest{Action: page.ActionSelectOption, Query: combo, Value: "Atlantis", Timeout: 20 * time.Second})
	if !errors.Is(err, page.ErrInvalidRequest) || !strings.Contains(err.Error(), `no option "Atlantis"`) {
		t.Fatalf("a disabled option: %v", err)
	}
	if txt := logText(); strings.Contains(txt, "country=xx") {
		t.Fatalf("the disabled option was chosen: %q", txt)
	}
}

// TestPortSecretFill: a secret is typed only into a field of a document of one of its origins —
// elsewhere it is refused before any input and the field stays empty —; where it is typed,
// observations, queries and extracts read the reference, never the value, the field is drawn
// masked, and a secret into what is not a text field is refused.
func TestPortSecretFill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := servePage(t, `<!doctype html><title>Sign in</title><label for="u">Account key</label><input id="u" name="key">
<label><input type="checkbox" id="c"> Remember me</label>`)
	s := portSession(t, ctx, &events{}, srv.URL)
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	const canary = "canary-Pw-7f3a9"
	field := &page.Query{Label: "Account key"}
	fill := func(q *page.Query, origins ...string) (*page.ActResult, error) {
		return s.Act(ctx, page.ActRequest{Action: page.ActionFill, Query: q, Value: canary, SecretRef: "sec_test1", SecretOrigins: origins, Timeout: 10 * time.Second})
	}
	value := func() string {
		v, err := s.evaluate(ctx, `document.getElementById('u').value`, false)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var so *page.SecretOriginError
	if _, err := fill(field, "https://elsewhere.example"); !errors.As(err, &so) || so.Origin != srv.URL {
		t.Fatalf("a secret of another origin: %v", err)
	}
	if v := value(); v != "" {
		t.Fatalf("the field holds %q after a refused secret fill", v)
	}
	res, err := fill(field, "https://elsewhere.example", srv.URL)
	if err != nil || res.Origin != srv.URL {
		t.Fatalf("a secret into a field of its origin: %+v %v", res, err)
	}
	if v := value(); v != canary {
		t.Fatalf("the field holds %q, want the secret typed", v)
	}
	masked, err := s.evaluate(ctx, `getComputedStyle(document.getElementById('u')).getPropertyValue('-webkit-text-security')`, false)
	if err != nil || masked != "disc" {
		t.Fatalf("the filled field is drawn with text-security %q (%v), want disc", masked, err)
	}
	snap, err := s.Observe(ctx, page.ObserveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.QueryNodes(ctx, page.QueryRequest{Query: *field})
	if err != nil || len(q.Nodes) != 1 || q.Nodes[0].Value != "[secret sec_test1]" {
		t.Fatalf("the filled field queries as %+v (%v), want the reference", q, err)
	}
	attrs, err := s.Extract(ctx, page.ExtractRequest{Kind: page.ExtractAttributes, Query: field})
	if err != nil {
		t.Fatal(err)
	}
	text, err := s.Extract(ctx, page.ExtractRequest{Kind: page.ExtractText})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal([]any{snap, q, attrs, text, res})
	if strings.Contains(string(all), canary) {
		t.Fatalf("an answer holds the secret: %s", all)
	}
	if _, err := fill(&page.Query{Label: "Remember me"}, srv.URL); !errors.Is(err, page.ErrInvalidRequest) {
		t.Fatalf("a secret into a checkbox: %v", err)
	}
}
