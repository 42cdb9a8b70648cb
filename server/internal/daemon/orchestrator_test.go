package daemon

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/orchestrator/orchestratortest"
	"github.com/originweave/bap/server/internal/redact"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestNewOrchestrator(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	log := slog.New(redact.NewHandler(slog.NewJSONHandler(logs, nil), nil))

	// None configured: a nil interface (not a typed nil), so the app refuses autonomous tasks.
	o, err := newOrchestrator(t.Context(), Config{}, log)
	if err != nil || o != nil {
		t.Fatalf("no URL: %v, %v; want nil, nil", o, err)
	}

	const token = "wl-daemon-token-5e6f7a8b9c"
	fake := orchestratortest.Start(t, orchestratortest.Config{Token: token, Models: []orchestratortest.Model{
		{ID: "m", Provider: "acme", Region: "eu", RetentionDays: orchestratortest.Days(0), MaxClassification: "restricted"},
	}})
	dir := t.TempDir()
	tokFile, cfgFile := filepath.Join(dir, "token"), filepath.Join(dir, "models.json")
	_ = os.WriteFile(tokFile, []byte(token+"\n"), 0o600)
	_ = os.WriteFile(cfgFile, []byte(`{"default": ["m"]}`), 0o600)
	o, err = newOrchestrator(t.Context(), Config{OrchestratorURL: fake.URL, OrchestratorCredentialFile: tokFile, OrchestratorConfigFile: cfgFile}, log)
	if err != nil || o == nil {
		t.Fatalf("configured: %v, %v", o, err)
	}
	if got, err := o.Eligible(t.Context(), app.RolePlanner, app.ModelPolicy{}); err != nil || len(got) != 1 {
		t.Errorf("eligible = %+v, %v", got, err)
	}
	if s := logs.String(); !strings.Contains(s, `"msg":"model orchestrator"`) || !strings.Contains(s, `"models":1`) || strings.Contains(s, token) {
		t.Errorf("start line missing, or the credential logged:\n%s", s)
	}

	// Unreachable at start: a warning, not a failure.
	gone := orchestratortest.Start(t, orchestratortest.Config{})
	url := gone.URL
	gone.Close()
	if o, err := newOrchestrator(t.Context(), Config{OrchestratorURL: url, OrchestratorToken: token}, log); err != nil || o == nil {
		t.Errorf("unreachable orchestrator: %v, %v; want a client and a warning", o, err)
	}
	if !strings.Contains(logs.String(), "not reachable at start") {
		t.Errorf("no warning:\n%s", logs.String())
	}

	// A bad configuration file does not start.
	_ = os.WriteFile(cfgFile, []byte(`{"roles": {"poet": ["m"]}}`), 0o600)
	if _, err := newOrchestrator(t.Context(), Config{OrchestratorURL: fake.URL, OrchestratorConfigFile: cfgFile}, log); err == nil {
		t.Error("an unknown role was accepted")
	}
	if err := (&Config{Profile: ProfileLocal, Listen: "127.0.0.1:7777", OrchestratorConfigFile: cfgFile}).Validate(); err == nil || !strings.Contains(err.Error(), "--orchestrator-url") {
		t.Errorf("config without URL: %v", err)
	}
}
