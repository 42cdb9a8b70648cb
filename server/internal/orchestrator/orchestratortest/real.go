package orchestratortest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The real contextual-orchestrator, for tests that run through it (issue #21): BAP → the
// orchestrator (its unmodified copy at ContextualCommit, run with python3 and its standard library
// only) → scripted fakes of this package as the model providers, each behind a keyless local://
// agent. The copy is found at $BAP_CONTEXTUAL_ORCHESTRATOR, else at
// ../shared/third_party/contextual-orchestrator beside the repository (the directory holding
// go.mod); a test that needs it and does not find it fails, it never skips.

// EnvContextualDir names the directory of the orchestrator's copy (default: see above);
// EnvPython the Python 3 interpreter (default: python3 on PATH, Debian's).
const (
	EnvContextualDir = "BAP_CONTEXTUAL_ORCHESTRATOR"
	EnvPython        = "BAP_PYTHON3"
)

// Agent is one agent of the real orchestrator.
type Agent struct {
	ID, Model, ProviderName string
	Tags                    []string
	Priority                int
	// Provider is the scripted upstream (a plain-mode fake listing Model): the agent's base_url is
	// local://<its host:port>/v1.
	Provider *Server
}

// RealConfig configures StartContextualOrchestrator.
type RealConfig struct {
	// Agents are the orchestrator's agents. With AgentsFile they are read from that file instead
	// (an agents file such as docs/examples/contextual-orchestrator-agents.json), each base_url
	// pointed at the provider Providers names for its agent id.
	Agents     []Agent
	AgentsFile string
	Providers  map[string]*Server
	// Token is the orchestrator's --auth-token (default "bap-test-orchestrator-token").
	Token string
}

// Real is a running contextual-orchestrator.
type Real struct {
	// URL is what to point BAP at: a recording tap in front of the orchestrator (Requests, Saw).
	URL string
	// Direct is the orchestrator itself (requests there are not recorded).
	Direct string
	Token  string

	mu     sync.Mutex
	log    []Request
	output bytes.Buffer // the orchestrator's stdout and stderr
}

// ContextualDir finds the orchestrator's copy (see EnvContextualDir) and checks it is the one of
// ContextualCommit.
func ContextualDir() (string, error) {
	dir := os.Getenv(EnvContextualDir)
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "..", "shared", "third_party", "contextual-orchestrator")
	}
	if _, err := os.Stat(filepath.Join(dir, "contextual_orchestrator", "__main__.py")); err != nil {
		return "", fmt.Errorf("contextual-orchestrator is not at %s (set %s to its copy at commit %s): %w", dir, EnvContextualDir, ContextualCommit, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "openapi-"+ContextualCommit+".json")); err != nil {
		return "", fmt.Errorf("the copy of contextual-orchestrator at %s is not the one of commit %s: %w", dir, ContextualCommit, err)
	}
	return dir, nil
}

// repoRoot is the nearest directory above the working directory holding go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// RepoFile is the path of a file of the repository (e.g. "docs/examples/…").
func RepoFile(rel string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, filepath.FromSlash(rel)), nil
}

// agentEntry is an entry of the orchestrator's agents file.
type agentEntry struct {
	ID           string   `json:"id"`
	Model        string   `json:"model"`
	BaseURL      string   `json:"base_url"`
	ProviderName string   `json:"provider_name,omitempty"`
	Tags         []string `json:"tags,omitempty"`
	Priority     int      `json:"priority"`
}

// agentsFile builds the agents file of cfg.
func agentsFile(cfg RealConfig) ([]byte, error) {
	local := func(p *Server) (string, error) {
		if p == nil {
			return "", errors.New("an agent without a provider")
		}
		u, err := url.Parse(p.URL)
		if err != nil {
			return "", err
		}
		return "local://" + u.Host + "/v1", nil
	}
	var entries []agentEntry
	if cfg.AgentsFile != "" {
		b, err := os.ReadFile(cfg.AgentsFile)
		if err != nil {
			return nil, err
		}
		var f struct {
			Agents []agentEntry `json:"agents"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.AgentsFile, err)
		}
		for _, e := range f.Agents {
			p, ok := cfg.Providers[e.ID]
			if !ok {
				return nil, fmt.Errorf("%s: no provider for agent %q", cfg.AgentsFile, e.ID)
			}
			if !strings.HasPrefix(e.BaseURL, "local://") {
				return nil, fmt.Errorf("%s: agent %q is not a local:// agent", cfg.AgentsFile, e.ID)
			}
			if e.BaseURL, err = local(p); err != nil {
				return nil, err
			}
			entries = append(entries, e)
		}
	}
	for _, a := range cfg.Agents {
		base, err := local(a.Provider)
		if err != nil {
			return nil, fmt.Errorf("agent %q: %w", a.ID, err)
		}
		entries = append(entries, agentEntry{ID: a.ID, Model: a.Model, BaseURL: base, ProviderName: a.ProviderName,
			Tags: a.Tags, Priority: a.Priority})
	}
	if len(entries) == 0 {
		return nil, errors.New("no agents")
	}
	return json.MarshalIndent(map[string]any{"agents": entries}, "", "  ")
}

// StartContextualOrchestrator starts the real orchestrator until the test ends; it fails the
// test when the copy or python3 is missing.
func StartContextualOrchestrator(t TB, cfg RealConfig) *Real {
	t.Helper()
	dir, err := ContextualDir()
	if err != nil {
		t.Fatalf("orchestratortest: %v", err)
	}
	python := os.Getenv(EnvPython)
	if python == "" {
		if python, err = exec.LookPath("python3"); err != nil {
			t.Fatalf("orchestratortest: python3 (Debian's; make deps installs it) is needed to run contextual-orchestrator: %v", err)
		}
	}
	agents, err := agentsFile(cfg)
	if err != nil {
		t.Fatalf("orchestratortest: agents: %v", err)
	}
	tmp, err := os.MkdirTemp("", "contextual-orchestrator-")
	if err != nil {
		t.Fatalf("orchestratortest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	agentsPath := filepath.Join(tmp, "agents.json")
	if err := os.WriteFile(agentsPath, agents, 0o600); err != nil {
		t.Fatalf("orchestratortest: %v", err)
	}
	if cfg.Token == "" {
		cfg.Token = "bap-test-orchestrator-token"
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("orchestratortest: %v", err)
	}
	o := &Real{Token: cfg.Token, Direct: fmt.Sprintf("http://127.0.0.1:%d", port)}
	cmd := exec.Command(python, "-u", "-m", "contextual_orchestrator", "--serve", "--agents", agentsPath,
		"--host", "127.0.0.1", "--port", fmt.Sprint(port), "--auth-token", cfg.Token)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("orchestratortest: %v", err)
	}
	cmd.Stderr = (*lockedWriter)(o)
	if err := cmd.Start(); err != nil {
		t.Fatalf("orchestratortest: starting contextual-orchestrator: %v", err)
	}
	exited := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			_, _ = (*lockedWriter)(o).Write(append(sc.Bytes(), '\n'))
			if !signalled && strings.HasPrefix(sc.Text(), "listening on ") {
				signalled = true
				close(ready)
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // the process this helper started, by its handle
		<-exited
	})
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("orchestratortest: contextual-orchestrator exited at start:\n%s", o.Output())
	case <-time.After(30 * time.Second):
		t.Fatalf("orchestratortest: contextual-orchestrator did not start within 30 s:\n%s", o.Output())
	}
	o.URL = o.startTap(t)
	return o
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// lockedWriter appends to the orchestrator's output.
type lockedWriter Real

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.output.Write(p)
}

// Output is what the orchestrator printed (stdout and stderr).
func (o *Real) Output() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.output.String()
}

// startTap serves a reverse proxy in front of the orchestrator that records every request.
func (o *Real) startTap(t TB) string {
	target, _ := url.Parse(o.Direct)
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("orchestratortest: %v", err)
	}
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, At: time.Now()}
		sw := &statusWriter{ResponseWriter: w}
		proxy.ServeHTTP(sw, r)
		rec.Status = sw.status
		if r.Context().Err() != nil {
			rec.Status = StatusClientGone
		}
		o.mu.Lock()
		o.log = append(o.log, rec)
		o.mu.Unlock()
	})}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if hs.Shutdown(ctx) != nil {
			_ = hs.Close()
		}
	})
	return "http://" + l.Addr().String()
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Requests is what reached the orchestrator through URL, oldest first (a request is logged once
// answered).
func (o *Real) Requests() []Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Request(nil), o.log...)
}

// Saw reports whether sub occurs in a request that reached the orchestrator (path, header or
// body, JSON escapes undone) or in what the orchestrator printed.
func (o *Real) Saw(sub string) bool {
	if sub == "" {
		return false
	}
	if strings.Contains(o.Output(), sub) {
		return true
	}
	for _, r := range o.Requests() {
		if strings.Contains(r.Path, sub) || bytes.Contains(r.Body, []byte(sub)) || strings.Contains(unescapeJSON(r.Body), sub) {
			return true
		}
		for _, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, sub) {
					return true
				}
			}
		}
	}
	return false
}

// Flood sends GET /v1/models straight to the orchestrator (from the same IP as BAP) until it
// answers 429 rate_limit_exceeded, and returns how many it accepted first.
func (o *Real) Flood(ctx context.Context) (int, error) {
	for n := 0; n < 1000; n++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.Direct+"/v1/models", nil)
		if err != nil {
			return n, err
		}
		req.Header.Set("Authorization", "Bearer "+o.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return n, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			if !bytes.Contains(b, []byte("rate_limit_exceeded")) {
				return n, fmt.Errorf("429 without rate_limit_exceeded: %s", b)
			}
			return n, nil
		}
		if resp.StatusCode != http.StatusOK {
			return n, fmt.Errorf("GET /v1/models: %d %s", resp.StatusCode, b)
		}
	}
	return 1000, errors.New("no 429 after 1000 requests")
}
