package bap_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	bap "github.com/originweave/bap/sdk-go"
)

// The examples run against a live server: $BAP_BASE_URL when set, else a `bap serve` (local
// profile, embedded PostgreSQL, the node's headless Chromium) that TestMain builds from
// ../server/cmd/bap with `go build` and starts on a temporary data dir — sdk-go itself never
// imports the server. shopURL is a small web site the browser examples visit.
var (
	serverURL string
	shopURL   string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if !runsExamples() {
		os.Exit(m.Run())
	}
	shop := httptest.NewServer(http.HandlerFunc(shopPage))
	shopURL = shop.URL
	serverURL = os.Getenv("BAP_BASE_URL")
	stop := func() {}
	if serverURL == "" {
		var err error
		if serverURL, stop, err = startServer(); err != nil {
			fmt.Fprintln(os.Stderr, "sdk-go examples:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	stop()
	shop.Close()
	os.Exit(code)
}

// runsExamples reports whether this run includes examples (-run empty or matching one).
func runsExamples() bool {
	f := flag.Lookup("test.run")
	if f == nil || f.Value.String() == "" {
		return true
	}
	re, err := regexp.Compile(f.Value.String())
	return err != nil || re.MatchString("Example") || re.MatchString("Example_workflow") || re.MatchString("ExampleClient_CreateTask") ||
		re.MatchString("ExampleProblem") || re.MatchString("ExampleClient_Subscribe")
}

func startServer() (string, func(), error) {
	dir, err := os.MkdirTemp("", "bap-sdk-go-examples-")
	if err != nil {
		return "", nil, err
	}
	_ = os.Chmod(dir, 0o755) // as root, the embedded PostgreSQL runs as postgres and must reach it
	bin := filepath.Join(dir, "bap")
	build := exec.Command("go", "build", "-o", bin, "../server/cmd/bap")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building bap: %w", err)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "serve", "--data-dir", data, "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "BAP_DATABASE_URL=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	ready := make(chan string, 1)
	var logs strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			var m struct{ Msg, Listen string }
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Msg == "ready" {
				ready <- m.Listen
			}
		}
		_ = cmd.Wait()
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	}
	select {
	case listen := <-ready:
		return "http://" + listen, stop, nil
	case <-done:
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("bap serve exited before ready:\n%s", logs.String())
	case <-time.After(90 * time.Second):
		stop()
		return "", nil, errors.New("bap serve not ready in 90 s")
	}
}

// shopPage serves a form that leads to a thank-you page.
func shopPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	switch r.URL.Path {
	case "/":
		fmt.Fprint(w, `<!doctype html><html><head><title>Shop</title></head><body><h1>Shop</h1>`+
			`<form action="/thanks" method="get"><label for="n">Your name</label> <input id="n" name="name">`+
			`<button type="submit">Order</button></form></body></html>`)
	case "/thanks":
		fmt.Fprintf(w, `<!doctype html><html><head><title>Thanks</title></head><body><h1>Thanks, %s</h1></body></html>`,
			html.EscapeString(r.URL.Query().Get("name")))
	default:
		http.NotFound(w, r)
	}
}

// A whole task: create it, open a browser session, navigate, observe, act, check the result
// and close the task against its postcondition.
func Example_workflow() {
	ctx := context.Background()
	c := bap.NewClient(serverURL) // e.g. "http://127.0.0.1:7777" (`make run`)

	created, err := c.CreateTask(ctx, bap.CreateTaskRequest{
		Goal:   "Order as Ada",
		Policy: bap.Policy{AllowedOrigins: []string{shopURL}},
		Postcondition: &bap.Postcondition{All: []bap.Clause{
			clause(`{"text_present": "Thanks, Ada"}`),
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	taskID := created.Task.TaskId
	fmt.Println("task:", created.Task.State)

	opened, err := c.CreateBrowserSession(ctx, taskID, bap.CreateBrowserSessionRequest{})
	if err != nil {
		log.Fatal(err)
	}
	sessionID := opened.Session.SessionId
	if _, err := c.Navigate(ctx, sessionID, bap.NavigateRequest{Url: shopURL + "/"}); err != nil {
		log.Fatal(err)
	}
	page, err := c.Observe(ctx, sessionID, bap.ObserveRequest{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("page:", page.Title)

	// Act on a node handle from observe, or on a query resolved just before acting.
	box := find(page.Nodes, "textbox")
	if _, err := c.Act(ctx, sessionID, bap.ActRequest{Action: bap.ActActionFill, NodeId: box.NodeId, Value: new("Ada")}); err != nil {
		log.Fatal(err)
	}
	click, err := c.Act(ctx, sessionID, bap.ActRequest{Action: bap.ActActionClick,
		Query: &bap.Query{Role: new("button"), Name: new("Order")}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("navigated:", click.Navigated)

	text, err := c.Extract(ctx, sessionID, bap.ExtractRequest{Kind: bap.ExtractKindText})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("text:", text.Data)

	closed, err := c.CloseTask(ctx, taskID, bap.CloseTaskRequest{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("closed:", closed.Task.State, *closed.Task.Verification)
	if _, err := c.CloseBrowserSession(ctx, sessionID, bap.CloseBrowserSessionRequest{}); err != nil {
		log.Fatal(err)
	}
	// Output:
	// task: admitted
	// page: Shop
	// navigated: true
	// text: Thanks, Ada
	// closed: succeeded verified
}

func clause(js string) bap.Clause {
	var c bap.Clause
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		log.Fatal(err)
	}
	return c
}

// find returns the first node with role, depth first.
func find(nodes []bap.Node, role string) *bap.Node {
	for i := range nodes {
		if nodes[i].Role == role {
			return &nodes[i]
		}
		if nodes[i].Children != nil {
			if n := find(*nodes[i].Children, role); n != nil {
				return n
			}
		}
	}
	return nil
}

// The same Idempotency-Key with the same body answers the first response again: the task is
// created once.
func ExampleClient_CreateTask() {
	ctx := context.Background()
	c := bap.NewClient(serverURL)
	req := bap.CreateTaskRequest{Goal: "Check the price", Policy: bap.Policy{AllowedOrigins: []string{"https://shop.example.com"}}}
	key := fmt.Sprintf("example-%d", time.Now().UnixNano())

	first, err := c.CreateTask(ctx, req, bap.WithIdempotencyKey(key))
	if err != nil {
		log.Fatal(err)
	}
	var meta bap.ResponseMeta
	again, err := c.CreateTask(ctx, req, bap.WithIdempotencyKey(key), bap.WithResponseMeta(&meta))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.Task.State, first.Receipt.Outcome)
	fmt.Println("same task:", again.Task.TaskId == first.Task.TaskId, "replayed:", meta.Replayed)
	// Output:
	// admitted applied
	// same task: true replayed: true
}

// Errors are *bap.Problem values with the HTTP status and a stable code.
func ExampleProblem() {
	c := bap.NewClient(serverURL)
	_, err := c.GetTask(context.Background(), "tsk_doesnotexist")
	var p *bap.Problem
	if errors.As(err, &p) {
		fmt.Println(p.Status, p.Code)
	}
	fmt.Println(bap.IsProblem(err, bap.ProblemCodeNotFound))
	// Output:
	// 404 not_found
	// true
}

// Subscribe follows a task's history as an iterator that resumes by itself after a dropped
// connection; leaving the loop ends the subscription.
func ExampleClient_Subscribe() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := bap.NewClient(serverURL)
	created, err := c.CreateTask(ctx, bap.CreateTaskRequest{Goal: "Watch me", Policy: bap.Policy{AllowedOrigins: []string{"https://shop.example.com"}}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.CancelTask(ctx, created.Task.TaskId, bap.CancelTaskRequest{Reason: new("done")}); err != nil {
		log.Fatal(err)
	}
	for ev, err := range c.Subscribe(ctx, created.Task.TaskId, 0) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.Seq, ev.Type)
		if ev.Type == "task.state_changed" && ev.Data["to"] == "cancelled" {
			break
		}
	}
	// Output:
	// 1 task.created
	// 2 command.recorded
	// 3 task.state_changed
	// 4 receipt.issued
	// 5 command.recorded
	// 6 task.state_changed
}

// In the remote profile a client authenticates with OAuth client credentials: the SDK asks the
// token endpoint for a token bound to the server's URL (RFC 8707) and caches it until shortly
// before it expires.
func ExampleWithClientCredentials() {
	c := bap.NewClient("https://bap.example.com",
		bap.WithClientCredentials("https://bap.example.com/oauth2/token",
			os.Getenv("BAP_CLIENT_ID"), os.Getenv("BAP_CLIENT_SECRET"), "https://bap.example.com"))
	_ = c
}
