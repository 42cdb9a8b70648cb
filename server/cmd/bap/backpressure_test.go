package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Backpressure tried as the issue's "Done means" asks: flood session creation on a real `bap
// serve` with Chromium, from three tenants at once, and get only clean answers — 201, 429
// rate_limited or 503 overloaded, every refusal with Retry-After — while the server stays healthy,
// no slot leaks, and a refused Idempotency-Key still works once capacity frees.

type floodAnswer struct {
	tenant, key string
	status      int
	code        string
	retryAfter  string
	replayed    string
	sessionID   string
	raw         string
}

func TestFloodOfSessionRequestsAnswersOnly201429503(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	// Small session caps so that three tenants overrun the node (3 × 4 > 8) within seconds on a
	// 2-core machine; the in-flight caps are the defaults (64 per tenant, 256 in all).
	const perTenant, perNode = 4, 8
	r, base := startRemote(t, bin, dir, "--max-sessions", strconv.Itoa(perNode), "--max-sessions-per-tenant", strconv.Itoa(perTenant))

	tenants := []string{"flood-a", "flood-b", "flood-c"}
	tokens := map[string]string{}
	tasks := map[string]string{}
	for _, tn := range tenants {
		cl := admin(t, bin, dir, "", "client", "create", "--tenant", tn, "--name", "flood "+tn,
			"--scopes", "bap:tasks.read bap:tasks.write bap:browser.act")
		tokens[tn] = accessToken(t, base, cl)
		status, m, _ := call(t, "POST", base+"/bap/v1/tasks", tokens[tn],
			`{"goal":"flood","policy":{"allowed_origins":["https://shop.example.com"]}}`)
		if status != 201 {
			t.Fatalf("create_task for %s: %d %v", tn, status, m)
		}
		tasks[tn] = field(m, "task", "task_id")
	}
	const n = 300
	client := &http.Client{Timeout: 90 * time.Second, Transport: specTransport(&http.Transport{MaxIdleConnsPerHost: n})}
	send := func(tn, key string) floodAnswer {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", base+"/bap/v1/tasks/"+tasks[tn]+"/browser-sessions", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tokens[tn])
		req.Header.Set("Idempotency-Key", key)
		a := floodAnswer{tenant: tn, key: key}
		resp, err := client.Do(req)
		if err != nil {
			a.raw = err.Error()
			return a
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		a.status, a.raw = resp.StatusCode, string(body)
		a.retryAfter, a.replayed = resp.Header.Get("Retry-After"), resp.Header.Get("Idempotent-Replayed")
		if m := regexp.MustCompile(`"code":"([a-z_]+)"`).FindStringSubmatch(a.raw); m != nil {
			a.code = m[1]
		}
		if m := regexp.MustCompile(`"session_id":"(bs_[A-Za-z0-9_-]+)"`).FindStringSubmatch(a.raw); m != nil {
			a.sessionID = m[1]
		}
		return a
	}

	answers := make([]floodAnswer, n)
	var wg sync.WaitGroup
	startGate := make(chan struct{})
	began := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tn := tenants[i%len(tenants)]
			<-startGate
			answers[i] = send(tn, fmt.Sprintf("flood-%d", i))
		}()
	}
	close(startGate)
	wg.Wait()
	took := time.Since(began)

	created := map[string][]floodAnswer{}
	byCode := map[string]int{}
	var refused []floodAnswer
	for _, a := range answers {
		switch a.status {
		case 201:
			if a.sessionID == "" {
				t.Fatalf("201 without a session: %s", a.raw)
			}
			created[a.tenant] = append(created[a.tenant], a)
		case 429, 503:
			want := map[int]string{429: "rate_limited", 503: "overloaded"}[a.status]
			if a.code != want {
				t.Fatalf("%d with code %q, want %s: %s", a.status, a.code, want, a.raw)
			}
			if s, err := strconv.Atoi(a.retryAfter); err != nil || s < 1 {
				t.Fatalf("%d %s without a valid Retry-After (%q)", a.status, a.code, a.retryAfter)
			}
			refused = append(refused, a)
		default:
			t.Fatalf("request %s of %s answered %d: %s", a.key, a.tenant, a.status, a.raw)
		}
		byCode[strconv.Itoa(a.status)+" "+a.code]++
	}
	total := 0
	for _, tn := range tenants {
		if len(created[tn]) > perTenant {
			t.Fatalf("%s got %d sessions, cap %d", tn, len(created[tn]), perTenant)
		}
		total += len(created[tn])
	}
	t.Logf("%d requests in %v: %v; sessions per tenant a=%d b=%d c=%d", n, took.Round(time.Millisecond), byCode,
		len(created["flood-a"]), len(created["flood-b"]), len(created["flood-c"]))
	if total == 0 || total > perNode {
		t.Fatalf("%d sessions opened, want 1..%d", total, perNode)
	}

	// Still healthy, and nothing leaked: no request holds an in-flight slot, no reservation of a
	// session being opened is left, and the node runs exactly the sessions it answered 201 for.
	for _, path := range []string{"/healthz", "/readyz"} {
		if status, _, raw := api(r.listen, "GET", path, "", ""); status != 200 {
			t.Fatalf("%s after the flood: %d %s", path, status, raw)
		}
	}
	metrics := scrape(t, r.listen)
	for metric, want := range map[string]float64{
		`bap_inflight_requests`:                   0,
		`bap_browser_sessions{state="opening"}`:   0,
		`bap_browser_sessions{state="open"}`:      float64(total),
		`bap_admission_limit{limit="sessions"}`:   perNode,
		`bap_admission_limit{limit="inflight"}`:   256,
		`bap_task_queue_depth{queue="admission"}`: 0,
		`bap_dead_letter_records`:                 0,
	} {
		if got, ok := metrics[metric]; !ok || got != want {
			t.Fatalf("%s = %v (present %v), want %v", metric, got, ok, want)
		}
	}
	refusals := 0.0
	for k, v := range metrics {
		if strings.HasPrefix(k, "bap_admission_refusals_total{") {
			refusals += v
		}
	}
	details := map[string]int{}
	for _, a := range refused {
		if m := regexp.MustCompile(`"detail":"([^"]*)"`).FindStringSubmatch(a.raw); m != nil {
			details[m[1]]++
		}
	}
	t.Logf("refusals: %v", details)
	if int(refusals) != len(refused) {
		t.Fatalf("bap_admission_refusals_total sums to %v, but %d requests were refused", refusals, len(refused))
	}

	// A refusal is not recorded under its key: once a session of that tenant closed, the same key
	// opens a session (a fresh 201, not a replayed refusal).
	var retry *floodAnswer
	for i := range refused {
		if len(created[refused[i].tenant]) > 0 {
			retry = &refused[i]
			break
		}
	}
	if retry == nil {
		t.Fatal("no refused request of a tenant that has a session")
	}
	closing := created[retry.tenant][0]
	status, m, _ := call(t, "POST", base+"/bap/v1/browser-sessions/"+closing.sessionID+"/close", tokens[retry.tenant], `{}`)
	if status != 200 {
		t.Fatalf("close_browser_session: %d %v", status, m)
	}
	again := send(retry.tenant, retry.key)
	if again.status != 201 || again.replayed == "true" {
		t.Fatalf("retrying refused key %s after a session closed: %d (replayed %q) %s", retry.key, again.status, again.replayed, again.raw)
	}
	if replay := send(retry.tenant, retry.key); replay.status != 201 || replay.replayed != "true" || replay.sessionID != again.sessionID {
		t.Fatalf("replaying key %s: %d (replayed %q) %s", retry.key, replay.status, replay.replayed, replay.raw)
	}
	select {
	case err := <-r.done:
		t.Fatalf("bap exited during the flood: %v", err)
	default:
	}
}

// scrape reads /metrics into name{labels} → value (histograms and summaries included as their
// series).
func scrape(t *testing.T, listen string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://"+listen+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, raw)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}
