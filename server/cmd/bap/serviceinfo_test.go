package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// assertRecordedAdapters checks GET /bap/v1 of a started node: the adapters it recorded at start
// in protocol_adapter, with versions — BAP over HTTP, MCP 2026-07-28 and CDP with its Chromium's
// product and version (issue #23 item 1) — and its engines from the engine registry: chromium, the
// default, driven by cdp at that same version, with its capabilities (issue #19 item 3).
func assertRecordedAdapters(t *testing.T, listen string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://"+listen+"/bap/v1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		Adapters []struct {
			AdapterID       string `json:"adapter_id"`
			ProtocolVersion string `json:"protocol_version"`
			Implementation  string `json:"implementation"`
		} `json:"adapters"`
		Engines []struct {
			Engine       string   `json:"engine"`
			AdapterID    string   `json:"adapter_id"`
			Version      string   `json:"version"`
			Default      bool     `json:"default"`
			Available    bool     `json:"available"`
			Capabilities []string `json:"capabilities"`
		} `json:"engines"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /bap/v1: %d %v", resp.StatusCode, err)
	}
	got := map[string]string{}
	for _, a := range info.Adapters {
		got[a.AdapterID] = a.ProtocolVersion + " " + a.Implementation
	}
	if len(got) != 3 || !strings.HasPrefix(got["bap-http"], "1.0.") || got["mcp"] != "2026-07-28 " ||
		!strings.Contains(got["cdp"], "Chrome/") {
		t.Fatalf("GET /bap/v1 adapters %v, want bap-http 1.0.x, mcp 2026-07-28 and cdp with the browser's version", got)
	}
	if len(info.Engines) != 1 {
		t.Fatalf("GET /bap/v1 engines %+v, want chromium alone", info.Engines)
	}
	e := info.Engines[0]
	if e.Engine != "chromium" || e.AdapterID != "cdp" || !e.Default || !e.Available || e.Version == "" ||
		!strings.HasSuffix(got["cdp"], "/"+e.Version) || !slices.Contains(e.Capabilities, "mhtml_evidence") {
		t.Fatalf("GET /bap/v1 engine %+v, want chromium, the default, over cdp at the version of %q", e, got["cdp"])
	}
}
