// Command bapbench is a small HTTP load generator for `make bench`: it drives one BAP operation
// from a fixed number of concurrent keep-alive clients for a fixed time and prints one JSON line
// with the throughput and latency percentiles. It measures; it never judges (scripts/bench.sh
// compares the figures with a baseline measured in the same run).
//
//	bapbench -url http://127.0.0.1:7777 -clients 16 -duration 20s -warmup 3s -op create_task
//
// Requests that start during the warm-up are sent but not counted; counted are the requests that
// start inside the measured window. Latency is measured per request from just before the request
// is written to after the whole response body is read, on successful requests only.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// op is one operation bapbench can drive.
type op struct {
	method string
	path   string
	body   []byte
	// want is the only status that counts as success.
	want int
	// keyed requests carry a fresh Idempotency-Key each.
	keyed bool
}

// createTaskBody is a typical create_task request: a goal and one allowed origin.
const createTaskBody = `{"goal":"order the cart on the shop","policy":{"allowed_origins":["https://shop.example.com"]}}`

var ops = map[string]op{
	"create_task": {method: http.MethodPost, path: "/bap/v1/tasks", body: []byte(createTaskBody), want: http.StatusCreated, keyed: true},
	// healthz touches no database: the cost of the HTTP stack alone, for comparison.
	"healthz": {method: http.MethodGet, path: "/healthz", want: http.StatusOK},
}

// result is the one JSON line bapbench prints.
type result struct {
	Op        string  `json:"op"`
	Clients   int     `json:"clients"`
	DurationS float64 `json:"duration_s"`
	Requests  int     `json:"requests"`
	Errors    int     `json:"errors"`
	RPS       float64 `json:"rps"`
	P50ms     float64 `json:"p50_ms"`
	P90ms     float64 `json:"p90_ms"`
	P99ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bapbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseURL := fs.String("url", "http://127.0.0.1:7777", "base URL of the server (with -socket only its path prefix matters)")
	socket := fs.String("socket", "", "Unix socket to connect to instead of the URL's host")
	clients := fs.Int("clients", 16, "concurrent clients, each with its own keep-alive connection")
	duration := fs.Duration("duration", 20*time.Second, "measured time")
	warmup := fs.Duration("warmup", 3*time.Second, "unmeasured time before it")
	opName := fs.String("op", "create_task", "operation: create_task or healthz")
	timeout := fs.Duration("timeout", 30*time.Second, "per-request timeout")
	maxErrorBodies := fs.Int("show-errors", 3, "print the first N error responses to stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	o, ok := ops[*opName]
	if !ok {
		fmt.Fprintf(stderr, "bapbench: unknown -op %q (create_task or healthz)\n", *opName)
		return 2
	}
	if *clients < 1 || *duration <= 0 || *warmup < 0 {
		fmt.Fprintln(stderr, "bapbench: -clients must be ≥ 1, -duration > 0, -warmup ≥ 0")
		return 2
	}
	target := strings.TrimSuffix(*baseURL, "/") + o.path
	if *socket != "" && !strings.HasPrefix(*baseURL, "http://") {
		fmt.Fprintln(stderr, "bapbench: with -socket, -url must be an http:// URL")
		return 2
	}

	r := newRunner(o, target, *socket, *clients, *timeout, *maxErrorBodies, stderr)
	res, err := r.run(*warmup, *duration)
	if err != nil {
		fmt.Fprintln(stderr, "bapbench:", err)
		return 1
	}
	res.Op = *opName
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		fmt.Fprintln(stderr, "bapbench:", err)
		return 1
	}
	return 0
}

// runner holds what the clients share; everything they write is per client.
type runner struct {
	op      op
	target  string
	clients int
	http    *http.Client
	// keyPrefix makes this run's Idempotency-Keys unique against earlier runs on the same server.
	keyPrefix string

	stderr     io.Writer
	errorsSeen atomic.Int64
	maxShown   int64
	printMu    sync.Mutex
}

func newRunner(o op, target, socket string, clients int, timeout time.Duration, maxShown int, stderr io.Writer) *runner {
	tr := &http.Transport{
		// One connection per client, kept alive for the whole run.
		MaxIdleConns:        clients * 2,
		MaxIdleConnsPerHost: clients * 2,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if socket != "" {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		}
	} else {
		tr.DialContext = d.DialContext
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return &runner{
		op: o, target: target, clients: clients,
		http:      &http.Client{Transport: tr, Timeout: timeout},
		keyPrefix: "bench-" + hex.EncodeToString(rnd[:]) + "-",
		stderr:    stderr, maxShown: int64(maxShown),
	}
}

// client is one simulated caller; its fields are written by its own goroutine only.
type client struct {
	lat      []time.Duration // successful requests in the window
	requests int
	errors   int
}

func (r *runner) run(warmup, duration time.Duration) (result, error) {
	// Fail fast on a server that is not there, rather than after the whole run.
	if err := r.probe(); err != nil {
		return result{}, err
	}
	start := time.Now()
	measureFrom := start.Add(warmup)
	measureTo := measureFrom.Add(duration)

	// Preallocated latency storage: room for 20k requests/s per run spread over the clients, so
	// that the hot path does not grow slices in the usual case.
	perClient := int(20000*duration.Seconds())/r.clients + 1024
	cs := make([]client, r.clients)
	var wg sync.WaitGroup
	for i := range cs {
		cs[i].lat = make([]time.Duration, 0, perClient)
		wg.Add(1)
		go func(id int, c *client) {
			defer wg.Done()
			r.loop(id, c, measureFrom, measureTo)
		}(i, &cs[i])
	}
	wg.Wait()
	r.http.CloseIdleConnections()

	var all []time.Duration
	res := result{Clients: r.clients, DurationS: duration.Seconds()}
	for i := range cs {
		res.Requests += cs[i].requests
		res.Errors += cs[i].errors
		all = append(all, cs[i].lat...)
	}
	slices.Sort(all)
	res.RPS = round(float64(len(all))/duration.Seconds(), 1)
	res.P50ms = ms(percentile(all, 0.50))
	res.P90ms = ms(percentile(all, 0.90))
	res.P99ms = ms(percentile(all, 0.99))
	if len(all) > 0 {
		res.MaxMs = ms(all[len(all)-1])
	}
	return res, nil
}

// loop sends requests back to back until measureTo; those started in [measureFrom, measureTo)
// are counted.
func (r *runner) loop(id int, c *client, measureFrom, measureTo time.Time) {
	prefix := r.keyPrefix + strconv.Itoa(id) + "-"
	keyBuf := make([]byte, 0, len(prefix)+20)
	for seq := 0; ; seq++ {
		begin := time.Now()
		if !begin.Before(measureTo) {
			return
		}
		var key string
		if r.op.keyed {
			keyBuf = strconv.AppendInt(append(keyBuf[:0], prefix...), int64(seq), 10)
			key = string(keyBuf)
		}
		ok := r.do(key)
		elapsed := time.Since(begin)
		if begin.Before(measureFrom) {
			continue
		}
		c.requests++
		if ok {
			c.lat = append(c.lat, elapsed)
		} else {
			c.errors++
		}
	}
}

// do sends one request and reads the whole response, so the connection goes back to the pool.
func (r *runner) do(key string) bool {
	var body io.Reader
	if r.op.body != nil {
		body = bytes.NewReader(r.op.body)
	}
	req, err := http.NewRequest(r.op.method, r.target, body) //nolint:noctx // the client's Timeout bounds it
	if err != nil {
		r.showError(0, err.Error())
		return false
	}
	if r.op.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		r.showError(0, err.Error())
		return false
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == r.op.want {
		_, err := io.Copy(io.Discard, resp.Body)
		if err != nil {
			r.showError(resp.StatusCode, "reading the body: "+err.Error())
			return false
		}
		return true
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	_, _ = io.Copy(io.Discard, resp.Body)
	r.showError(resp.StatusCode, string(b))
	return false
}

// showError prints the first few failures; the rest are only counted.
func (r *runner) showError(status int, detail string) {
	if r.errorsSeen.Add(1) > r.maxShown {
		return
	}
	r.printMu.Lock()
	defer r.printMu.Unlock()
	if status == 0 {
		fmt.Fprintf(r.stderr, "bapbench: request failed: %s\n", detail)
		return
	}
	fmt.Fprintf(r.stderr, "bapbench: status %d (want %d): %s\n", status, r.op.want, strings.TrimSpace(detail))
}

// probe checks once that the server answers /healthz.
func (r *runner) probe() error {
	u := r.target[:len(r.target)-len(r.op.path)] + "/healthz"
	resp, err := r.http.Get(u) //nolint:noctx // the client's Timeout bounds it
	if err != nil {
		return fmt.Errorf("server not reachable: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	return nil
}

// percentile returns the nearest-rank p-quantile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

func round(v float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(v*p) / p
}
