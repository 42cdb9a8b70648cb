package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// assertRecordedAdapters checks GET /bap/v1 of a started node: the adapters it recorded at start
// in protocol_adapter, with versions — BAP over HTTP, MCP 2026-07-28 and CDP with its Chromium's
// product and version (issue #23 item 1).
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
}
