package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/originweave/bap/server/internal/evidencebundle"
	"github.com/originweave/bap/server/internal/historychain"
)

const bundleUsage = "usage: bap bundle export TASK_ID [--out FILE] [--socket PATH] [--data-dir DIR] | " +
	"bap bundle verify FILE [--jwks FILE|URL] [--socket PATH] [--data-dir DIR]"

// errBundleInvalid makes `bap bundle verify` exit non-zero after printing its report.
var errBundleInvalid = errors.New("bundle invalid")

// bundleCommand runs `bap bundle export` (the operator's copy of get_task_bundle, over the
// server's Unix socket) and `bap bundle verify` (offline: the bundle and the server's audit keys,
// nothing else; ADR 0036).
func bundleCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(bundleUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("bap bundle "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := socketFlags(fs)
	out := fs.String("out", "", "export: write the bundle to this file (default: standard output)")
	jwks := fs.String("jwks", "", "verify: the server's audit keys, a JWKS file or the URL of GET /bap/v1/audit/keys (default: ask the local server over its socket)")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	switch sub {
	case "export":
		if len(pos) != 1 || !strings.HasPrefix(pos[0], "tsk_") {
			return errors.New(bundleUsage)
		}
		return exportBundle(ctx, socket(), pos[0], *out, stdout)
	case "verify":
		if len(pos) != 1 {
			return errors.New(bundleUsage)
		}
		return verifyBundle(ctx, pos[0], *jwks, socket(), stdout)
	default:
		return fmt.Errorf("bap bundle: unknown subcommand %q\n%s", sub, bundleUsage)
	}
}

// exportBundle streams get_task_bundle's answer to out (a file written whole, or stdout).
func exportBundle(ctx context.Context, socket, taskID, out string, stdout io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost/bap/v1/tasks/"+url.PathEscape(taskID)+"/bundle", nil)
	if err != nil {
		return err
	}
	resp, err := socketHTTP(socket).Do(req)
	if err != nil {
		return socketError(socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return problemOf(resp, raw)
	}
	// The server sends the bundle as it writes it: a bundle cut short fails the copy (its
	// Content-Length), and one that is not what the server digested fails the Repr-Digest check.
	sum := sha256.New()
	check := func() error {
		if want, got := resp.Header.Get("Repr-Digest"), "sha-256=:"+base64.StdEncoding.EncodeToString(sum.Sum(nil))+":"; want != got {
			return fmt.Errorf("the bundle received does not match its Repr-Digest (%s, received %s)", want, got)
		}
		return nil
	}
	if out == "" {
		if _, err := io.Copy(io.MultiWriter(stdout, sum), resp.Body); err != nil {
			return err
		}
		return check()
	}
	tmp := out + ".part"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.MultiWriter(f, sum), resp.Body)
	if err == nil {
		err = check()
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

// verifyBundle checks a bundle offline against the audit keys and prints the report. The keys
// are jwks (a file or a URL), or, without it, the local server's, asked over its socket.
func verifyBundle(ctx context.Context, file, jwks, socket string, stdout io.Writer) error {
	var raw []byte
	var err error
	if jwks != "" {
		raw, err = readKeySet(ctx, jwks)
	} else {
		raw, err = socketKeySet(ctx, socket)
	}
	if err != nil {
		return err
	}
	keys, err := historychain.ParseKeySet(raw)
	if err != nil {
		return fmt.Errorf("reading the audit keys: %w", err)
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	rep, err := evidencebundle.Verify(f, keys)
	if err != nil {
		return fmt.Errorf("%w: %w", errBundleInvalid, err)
	}
	if rep.Problems == nil {
		rep.Problems = []evidencebundle.Problem{}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	if !rep.Valid {
		names := make([]string, 0, len(rep.Problems))
		for _, p := range rep.Problems {
			names = append(names, p.Member)
		}
		return fmt.Errorf("%w: %s", errBundleInvalid, strings.Join(names, ", "))
	}
	return nil
}

// socketKeySet asks the local server for its audit keys (GET /bap/v1/audit/keys) over its socket.
func socketKeySet(ctx context.Context, socket string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost/bap/v1/audit/keys", nil)
	if err != nil {
		return nil, err
	}
	resp, err := socketHTTP(socket).Do(req)
	if err != nil {
		return nil, fmt.Errorf("no --jwks given, and the local server's audit keys could not be read: %w "+
			"(pass --jwks with the server's keys: a file, or the URL of its GET /bap/v1/audit/keys)", socketError(socket, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the local server's audit keys: %s", resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}

// readKeySet reads a JWKS from a file, or from an http(s) URL (the server's GET /bap/v1/audit/keys).
func readKeySet(ctx context.Context, src string) ([]byte, error) {
	if !strings.HasPrefix(src, "http://") && !strings.HasPrefix(src, "https://") {
		return os.ReadFile(src)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching the audit keys: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching the audit keys: %s", resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}
