// Command fakeorch serves the fake OpenAI-compatible model orchestrator of package
// orchestratortest on a port, for trying goal-driven tasks without a real orchestrator:
//
//	go run ./server/internal/orchestrator/orchestratortest/cmd/fakeorch --script script.json --listen 127.0.0.1:8089
//	bap serve --orchestrator-url http://127.0.0.1:8089 …
//
// The script (orchestratortest.Script) lists the models and queues answers per model. With
// --token-file the fake accepts only that bearer token, as a real orchestrator would. Each request
// is logged to stderr as one line (method, path, model, status) — never a body or a header.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/originweave/bap/server/internal/orchestrator/orchestratortest"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8089", "address to serve")
	script := flag.String("script", "", "script file (JSON: models and answers per model; required)")
	tokenFile := flag.String("token-file", "", "file holding the only bearer token accepted (default: any)")
	flag.Parse()
	if err := run(*listen, *script, *tokenFile); err != nil {
		fmt.Fprintln(os.Stderr, "fakeorch:", err)
		os.Exit(1)
	}
}

func run(listen, scriptFile, tokenFile string) error {
	if scriptFile == "" {
		return fmt.Errorf("--script is required")
	}
	sc, err := orchestratortest.LoadScript(scriptFile)
	if err != nil {
		return err
	}
	cfg := orchestratortest.Config{}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return err
		}
		line, _, _ := strings.Cut(string(b), "\n")
		cfg.Token = strings.TrimSpace(line)
	}
	srv, err := orchestratortest.Listen(listen, cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := sc.Apply(srv); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "fakeorch: serving %d model(s) at %s (API under /v1)\n", len(sc.Models), srv.URL)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv.SetObserver(func(r orchestratortest.Request) {
		model := ""
		if r.Chat != nil {
			model = " model=" + r.Chat.Model
		}
		fmt.Fprintf(os.Stderr, "fakeorch: %s %s%s → %d\n", r.Method, r.Path, model, r.Status)
	})
	<-ctx.Done()
	return nil
}
