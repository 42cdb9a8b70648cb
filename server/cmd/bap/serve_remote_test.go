package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/pgcluster"

	"github.com/originweave/bap/server/internal/waitfor"
)

// The remote profile tried as a new user would: `bap serve --profile remote --insecure-http`,
// `bap client create`, a token from the token endpoint, and every refusal of the "Done means" of
// the auth issue, against the real binary.

// startRemote runs `bap serve --profile remote` and returns its base URL.
func startRemote(t *testing.T, bin, dir string, args ...string) (*running, string) {
	t.Helper()
	r, m := serveProcess(t, bin, dir, nil, append([]string{"--profile", "remote", "--insecure-http"}, args...)...)
	if m["profile"] != "remote" {
		t.Fatalf("ready line: %v", m)
	}
	return r, "http://" + r.listen
}

// admin runs a `bap client …` / `bap user …` command and decodes its JSON output.
func admin(t *testing.T, bin, dir, stdin string, args ...string) map[string]any {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--data-dir", dir)...)
	if args[1] == "revoke" { // flags before the positional argument
		cmd = exec.Command(bin, args[0], args[1], "--data-dir", dir, args[2])
	}
	cmd.Env = append(os.Environ(), "BAP_DATABASE_URL=")
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bap %v: %v\n%s", args, err, stderr.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("bap %v printed %q", args, out)
	}
	return m
}

func tokenFor(t *testing.T, base string, client map[string]any, extra ...string) (int, map[string]any) {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "resource": {base}}
	for i := 0; i+1 < len(extra); i += 2 {
		form.Set(extra[i], extra[i+1])
	}
	req, _ := http.NewRequestWithContext(context.Background(), "POST", base+"/oauth2/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(client["client_id"].(string), client["client_secret"].(string))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

func accessToken(t *testing.T, base string, client map[string]any) string {
	t.Helper()
	status, body := tokenFor(t, base, client)
	tok, _ := body["access_token"].(string)
	if status != 200 || tok == "" {
		t.Fatalf("token endpoint: %d %v", status, body)
	}
	return tok
}

func call(t *testing.T, method, url, token, body string) (int, map[string]any, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(context.Background(), method, url, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "key-"+time.Now().Format("150405.000000000"))
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, m, resp.Header
}

const remoteTask = `{"goal":"remote task","policy":{"allowed_origins":["https://shop.example.com"]}}`

func TestServeRemoteProfileAsANewUser(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	r, base := startRemote(t, bin, dir, "--access-token-ttl", "4s")

	rw := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "ci runner", "--scopes", "bap:tasks.read bap:tasks.write bap:browser.act")
	ro := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "dashboard", "--scopes", "bap:tasks.read")
	other := admin(t, bin, dir, "", "client", "create", "--tenant", "globex", "--name", "globex", "--scopes", "bap:tasks.read bap:tasks.write")
	const redirect = "http://127.0.0.1:9/callback"
	console := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "Console", "--grant", "authorization_code",
		"--redirect-uri", redirect, "--scopes", "bap:tasks.read bap:tasks.write")
	const password = "Tr0ub4dor&3-canary-password"
	person := admin(t, bin, dir, password+"\n", "user", "create", "--tenant", "acme", "--name", "ada", "--password-stdin")
	if _, ok := console["client_secret"]; ok || person["user_id"] == nil {
		t.Fatalf("public client %v, person %v", console, person)
	}
	secrets := []string{rw["client_secret"].(string), ro["client_secret"].(string), other["client_secret"].(string), password}
	var tokens []string
	issued := func(tok string) string { tokens = append(tokens, tok); return tok }

	// A token (client credentials, resource = this server) creates a task.
	tok := issued(accessToken(t, base, rw))
	status, body, _ := call(t, "POST", base+"/bap/v1/tasks", tok, remoteTask)
	if status != 201 {
		t.Fatalf("create_task: %d %v", status, body)
	}
	taskID := body["task"].(map[string]any)["task_id"].(string)
	if status, body := tokenFor(t, base, rw, "resource", "https://elsewhere.example"); status != 400 || body["error"] != "invalid_target" {
		t.Fatalf("token for an unknown resource: %d %v", status, body)
	}

	// Canaries through the request paths: a password typed through `fill` and a cookie header.
	const fillCanary, cookieCanary = "fill-canary-Pa55w0rd!-7d1e", "cookie-canary-9f3b2c7a1d"
	secrets = append(secrets, fillCanary, cookieCanary)
	req, _ := http.NewRequestWithContext(context.Background(), "POST", base+"/bap/v1/browser-sessions/bs_canary/act",
		strings.NewReader(`{"action":"fill","node_id":"nd_canary","value":"`+fillCanary+`"}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "canary-fill")
	req.Header.Set("Cookie", "session="+cookieCanary)
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(raw), fillCanary) || resp.StatusCode < 400 {
			t.Fatalf("act on an unknown session: %d %s", resp.StatusCode, raw)
		}
	}

	// Read-only client: 403 insufficient_scope on create_task.
	if status, body, _ := call(t, "POST", base+"/bap/v1/tasks", issued(accessToken(t, base, ro)), remoteTask); status != 403 || body["code"] != "insufficient_scope" {
		t.Fatalf("read-only create_task: %d %v", status, body)
	}
	// Another tenant: 404.
	if status, body, _ := call(t, "GET", base+"/bap/v1/tasks/"+taskID, issued(accessToken(t, base, other)), ""); status != 404 {
		t.Fatalf("other tenant get_task: %d %v", status, body)
	}
	// No token, a forged one: 401 with the RFC 9728 challenge.
	parts := strings.Split(tok, ".")
	claims, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forgedClaims := strings.Replace(string(claims), `"tenant":"acme"`, `"tenant":"globex"`, 1)
	forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(forgedClaims)) + "." + parts[2]
	for name, bearer := range map[string]string{"none": "", "forged": forged} {
		status, body, h := call(t, "GET", base+"/bap/v1/tasks/"+taskID, bearer, "")
		if status != 401 || !strings.Contains(h.Get("WWW-Authenticate"), `resource_metadata="`+base+`/.well-known/oauth-protected-resource"`) {
			t.Fatalf("%s token: %d %v %q", name, status, body, h.Get("WWW-Authenticate"))
		}
	}
	// A token minted by another BAP server (another issuer, key and resource): 401.
	dirB := dataDir(t)
	_, baseB := startRemote(t, bin, dirB)
	foreignClient := admin(t, bin, dirB, "", "client", "create", "--tenant", "acme", "--name", "b", "--scopes", "bap:tasks.read")
	if status, body, _ := call(t, "GET", base+"/bap/v1/tasks/"+taskID, issued(accessToken(t, baseB, foreignClient)), ""); status != 401 {
		t.Fatalf("token of another server: %d %v", status, body)
	}

	// A real certified client library drives client credentials and the code flow end to end.
	runOAuth4WebAPI(t, base, rw, console, redirect, "ada", password)
	// The MCP conformance suite's authorization-server scenarios.
	runMCPAuthorizationConformance(t, bin, dir, base, "ada", password)

	// An expired token: --access-token-ttl 4s plus the 5 s leeway.
	expiring := issued(accessToken(t, base, rw))
	waitfor.Until(t, 20*time.Second, "the short-lived token expires", func() (bool, string) {
		status, body, _ := call(t, "GET", base+"/bap/v1/tasks/"+taskID, expiring, "")
		if status == 401 && strings.Contains(body["detail"].(string), "expired") {
			return true, ""
		}
		if status != 200 {
			t.Fatalf("waiting for expiry: %d %v", status, body)
		}
		return false, "still accepted"
	})

	// `bap client revoke` next to the running server: the client's live token is refused at once.
	live := issued(accessToken(t, base, rw))
	if status, _, _ := call(t, "GET", base+"/bap/v1/tasks/"+taskID, live, ""); status != 200 {
		t.Fatalf("live token: %d", status)
	}
	admin(t, bin, dir, "", "client", "revoke", rw["client_id"].(string))
	// The revocation reaches the server over NOTIFY (milliseconds); the cache TTL (2 s) bounds it
	// should a notice be lost. Poll briefly rather than race the notice.
	revokedAt := time.Now()
	waitfor.Until(t, time.Second, "the revoked client's token is refused", func() (bool, string) {
		status, body, _ := call(t, "GET", base+"/bap/v1/tasks/"+taskID, live, "")
		if status != 200 && status != 401 {
			t.Fatalf("token of a revoked client, %v after the revocation: %d %v", time.Since(revokedAt), status, body)
		}
		return status == 401, fmt.Sprint(status)
	})
	t.Logf("revoked client's token refused %v after `bap client revoke` returned", time.Since(revokedAt))
	if status, body := tokenFor(t, base, rw); status != 401 {
		t.Fatalf("a revoked client gets a token: %d %v", status, body)
	}

	// …nor in the metrics (labels are operations and statuses only).
	if resp, err := http.Get(base + "/metrics"); err != nil {
		t.Fatal(err)
	} else {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, s := range append(secrets, tokens...) {
			if strings.Contains(string(raw), s) {
				t.Errorf("/metrics contains a secret or token (…%s)", s[len(s)-6:])
			}
		}
	}

	// No secret, password or token in the database (history, audit trail, stored responses, …).
	assertNoSecretsInDatabase(t, dir, append(secrets, tokens...))

	// …nor in the server log.
	if err := r.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("stop: %v", err)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, `"operation":"oauth_token"`) {
		t.Fatalf("log lacks the token requests:\n%s", logs)
	}
	for _, s := range append(secrets, tokens...) {
		if strings.Contains(logs, s) || strings.Contains(logs, s[len(s)-16:]) {
			t.Errorf("server log contains a secret or token (…%s)", s[len(s)-6:])
		}
	}
	if strings.Contains(logs, "eyJ") || strings.Contains(logs, "bap_cs_") {
		t.Errorf("server log contains something token-shaped:\n%s", logs)
	}
}

// runOAuth4WebAPI runs testdata/oauth4webapi-e2e.mjs on the pinned Node.
func runOAuth4WebAPI(t *testing.T, base string, cc, ac map[string]any, redirect, person, password string) {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(root, "tools/node_modules/node/bin/node")
	lib := filepath.Join(root, "tools/node_modules/oauth4webapi/build/index.js")
	for _, p := range []string{node, lib} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s missing: `make test` installs tools/ (npm ci --prefix tools)", p)
		}
	}
	cmd := exec.Command(node, "testdata/oauth4webapi-e2e.mjs")
	cmd.Env = append(os.Environ(), "OAUTH4WEBAPI="+lib, "BASE="+base, "CC_ID="+cc["client_id"].(string),
		"CC_SECRET="+cc["client_secret"].(string), "AC_ID="+ac["client_id"].(string), "REDIRECT="+redirect,
		"PERSON="+person, "PASSWORD="+password)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("oauth4webapi end to end: %v\n%s", err, out)
	}
	t.Logf("oauth4webapi: %s", strings.TrimSpace(string(out)))
}

// assertNoSecretsInDatabase scans every row of every table of the server's embedded cluster.
func assertNoSecretsInDatabase(t *testing.T, dir string, secrets []string) {
	t.Helper()
	dsn, err := pgcluster.ConnStringFor(dir, "bap")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		rows, err := conn.Query(ctx, `SELECT row_to_json(t)::text FROM `+pgx.Identifier{table}.Sanitize()+` t`)
		if err != nil {
			t.Fatal(err)
		}
		texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range texts {
			for _, s := range secrets {
				if strings.Contains(text, s) || strings.Contains(text, s[len(s)-16:]) {
					t.Errorf("table %s holds a secret or token (…%s)", table, s[len(s)-6:])
				}
			}
		}
	}
}

// runMCPAuthorizationConformance runs `conformance authorization` (@modelcontextprotocol/conformance,
// pinned in tools/package.json) against the server: the RFC 8414 metadata scenario and the
// authorization-code-grant scenario, whose sign-in the test performs itself — it reads the URL the
// suite prints, loads our login page, posts its form with the person's name and password as a
// browser would, and follows the redirect to the suite's callback server.
func runMCPAuthorizationConformance(t *testing.T, bin, dir, base, person, password string) {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(root, "tools/node_modules/node/bin/node")
	suite := filepath.Join(root, "tools/node_modules/@modelcontextprotocol/conformance/dist/index.js")
	for _, p := range []string{node, suite} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s missing: `make test` installs tools/ (npm ci --prefix tools)", p)
		}
	}
	_, port, _ := net.SplitHostPort(portOutsideEphemeralRange(t)) // the suite's callback listener binds it later
	client := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "MCP conformance", "--grant", "authorization_code",
		"--redirect-uri", "http://127.0.0.1:"+port+"/callback", "--scopes", "bap:tasks.read")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, suite, "authorization", "--url", base, "--client-id", client["client_id"].(string),
		"--resource", base, "--port", port, "--spec-version", "2026-07-28")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	signedIn := make(chan error, 1)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		out.WriteString(line + "\n")
		if strings.HasPrefix(line, base+"/oauth2/auth?") {
			go func(u string) { signedIn <- signInAsBrowser(u, base, person, password) }(line)
		}
	}
	err = cmd.Wait()
	select {
	case serr := <-signedIn:
		if serr != nil {
			t.Errorf("signing in for the conformance suite: %v", serr)
		}
	default:
		t.Errorf("the suite printed no authorization URL")
	}
	if err != nil || !strings.Contains(out.String(), "Total: 2 passed, 0 failed") {
		t.Fatalf("MCP authorization conformance: %v\n%s", err, out.String())
	}
	t.Logf("MCP authorization conformance: %s", out.String()[strings.LastIndex(out.String(), "Total:"):])
}

// signInAsBrowser loads the login page at authURL, posts its form (hidden fields, name, password,
// Allow) and follows the redirect to the client's callback.
func signInAsBrowser(authURL, base, person, password string) error {
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(authURL)
	if err != nil {
		return err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("login page: %d %s", resp.StatusCode, page)
	}
	form := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(string(page), -1) {
		form.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	form.Set("username", person)
	form.Set("password", password)
	form.Set("decision", "allow")
	resp, err = noFollow.PostForm(base+"/oauth2/auth", form)
	if err != nil {
		return err
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode/100 != 3 || loc == "" {
		return fmt.Errorf("sign-in answered %d without a redirect", resp.StatusCode)
	}
	resp, err = http.Get(loc)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
