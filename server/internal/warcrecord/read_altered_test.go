package warcrecord

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
)

// ReadAll refuses an archive one of whose records no longer matches its digests; ReadAltered
// keeps the record as it is, marked Altered, and an Archive built from it serves it and names it.
func TestAnAlteredRecordIsReadAndNamed(t *testing.T) {
	p := newProxied(t, Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "Thank you for your order 1")
	}))
	p.do(t, "GET", "/thanks", "", "")
	_, raw := p.records(t, 3)
	edited := bytes.Replace(raw, []byte("order 1"), []byte("order 9"), 1)
	if _, err := ReadAll(bytes.NewReader(edited), 1<<20); err == nil {
		t.Fatal("ReadAll read an altered record")
	}
	recs, err := ReadAltered(bytes.NewReader(edited), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	altered := 0
	for _, r := range recs {
		if r.Altered {
			altered++
		}
	}
	if altered != 1 {
		t.Fatalf("%d records marked altered, want the response", altered)
	}
	a, err := NewArchive(recs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Altered(); len(got) != 1 || got[0] != p.site.URL+"/thanks" {
		t.Fatalf("Altered() = %v", got)
	}
}
