package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// baseFlags are the flags every browser starts with. The first line is what
// the deployment asks for (without the background-networking flags a closed
// network makes Chromium hang on lookups); the rest keep background tabs and
// popups running at full speed, because an agent acts in whichever tab it
// likes.
var baseFlags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--disable-background-timer-throttling", "--disable-backgrounding-occluded-windows",
	"--disable-renderer-backgrounding", "--disable-ipc-flooding-protection",
	"--disable-default-apps", "--disable-extensions", "--disable-breakpad",
	"--disable-client-side-phishing-detection", "--disable-domain-reliability",
	// Local network access checks would treat a document this package fulfils
	// (see netpolicy.go) as public and refuse its loopback and LAN frames; the
	// origin policy decides what a session may reach.
	"--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions,LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights",
	"--no-default-browser-check", "--metrics-recording-only", "--password-store=basic",
	"--use-mock-keychain", "--mute-audio", "--hide-scrollbars",
	"--window-size=1280,800",
	"--remote-debugging-pipe",
}

// findBinary returns the browser executable: cfg.Binary, or the first of
// chromium, chromium-browser and google-chrome on PATH.
func findBinary(bin string) (string, error) {
	if bin != "" {
		p, err := exec.LookPath(bin)
		if err != nil {
			return "", fmt.Errorf("%w (browser binary %q: %w)", ErrUnavailable, bin, err)
		}
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (none of chromium, chromium-browser, google-chrome is on PATH)", ErrUnavailable)
}

// process is one running browser.
type process struct {
	cmd     *exec.Cmd
	dir     string // user data dir, removed by stop
	conn    *conn
	exited  chan struct{}
	output  *tailBuffer
	stopped sync.Once
}

// launch starts the browser and waits until it answers.
func launch(ctx context.Context, bin string, extra []string, log *slog.Logger) (*process, error) {
	dir, err := os.MkdirTemp("", "bap-chromium-")
	if err != nil {
		return nil, fmt.Errorf("%w: creating the user data dir: %w", ErrUnavailable, err)
	}
	args := append(append([]string{}, baseFlags...), "--user-data-dir="+dir)
	args = append(args, extra...)
	args = append(args, "about:blank")

	cmdR, parentW, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	parentR, cmdW, err := os.Pipe()
	if err != nil {
		cmdR.Close()
		parentW.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	out := &tailBuffer{max: 16 << 10}
	// #nosec G204 -- the binary is the operator's configuration; arguments are fixed flags.
	cmd := exec.Command(bin, args...)
	cmd.ExtraFiles = []*os.File{cmdR, cmdW} // fd 3: commands, fd 4: replies
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		cmdR.Close()
		cmdW.Close()
		parentR.Close()
		parentW.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: starting %s: %w", ErrUnavailable, bin, err)
	}
	cmdR.Close()
	cmdW.Close()
	p := &process{cmd: cmd, dir: dir, exited: make(chan struct{}), output: out}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	p.conn = newConn(chromedp.NewPipeConn(parentR, parentW), log)

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := call(ctx, p.conn.root, browser.GetVersion, struct{}{}); err != nil {
		p.stop()
		msg := strings.TrimSpace(out.String())
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		return nil, fmt.Errorf("%w: the browser did not answer: %w; output: %s", ErrUnavailable, err, msg)
	}
	return p, nil
}

// stop closes the pipe (the browser exits), kills what is left after a grace
// period and removes the user data dir.
func (p *process) stop() {
	p.stopped.Do(func() {
		_ = p.conn.close()
		select {
		case <-p.exited:
		case <-time.After(3 * time.Second):
			killGroup(p.cmd)
			<-p.exited
		}
		killGroup(p.cmd) // helpers that outlived the browser
		_ = removeAllRetry(p.dir)
	})
}

func removeAllRetry(dir string) error {
	var err error
	for range 5 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = cmd.Process.Kill()
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
