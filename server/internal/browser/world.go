package browser

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/originweave/bap/server/internal/pagekit"
)

// agentJS is the page agent installed in an isolated world of each frame.
var agentJS = pagekit.AgentJS

// worldName names the isolated world (visible only to the protocol).
const worldName = "__bap_agent"

// errWorldGone means the world's document went away during a call.
var errWorldGone = errors.New("execution context gone")

// world is a frame's isolated world with the agent in it.
type world struct {
	t      *tab
	f      *frameState
	host   *targetConn
	id     runtime.ExecutionContextID
	serial uint64
	doc    uint64
}

// worldOf returns the frame's world, creating it (and installing the agent)
// when the frame has a new document.
func (s *Session) worldOf(ctx context.Context, t *tab, f *frameState) (*world, error) {
	f.worldMu.Lock()
	defer f.worldMu.Unlock()
	s.mu.Lock()
	if f.world != 0 && f.worldDoc == f.doc {
		w := &world{t: t, f: f, host: f.host, id: f.world, serial: f.worldSerial, doc: f.doc}
		s.mu.Unlock()
		return w, nil
	}
	host, doc := f.host, f.doc
	s.mu.Unlock()
	if host == nil {
		return nil, fmt.Errorf("%w: the frame is not attached", ErrStaleNodeHandle)
	}
	// The world was created with the document (Page.addScriptToEvaluateOnNewDocument
	// installed the agent in it); asking for it by name returns its context.
	res, err := call(ctx, host.sess, page.CreateIsolatedWorld, page.CreateIsolatedWorldParams{FrameID: f.id, WorldName: worldName})
	if err != nil {
		return nil, s.mapErr(fmt.Errorf("creating the agent world: %w", err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.doc != doc {
		return nil, errWorldGone // navigated meanwhile; the caller retries
	}
	if f.worldSerial != 0 {
		s.reg.purgeWorld(t, f, f.worldSerial)
	}
	s.docSeq++
	f.world = res.ExecutionContextID
	f.worldDoc = doc
	f.worldSerial = s.docSeq
	return &world{t: t, f: f, host: host, id: f.world, serial: f.worldSerial, doc: doc}, nil
}

// invalidate forgets the world after its context went away.
func (s *Session) invalidate(w *world) {
	s.mu.Lock()
	if w.f.world == w.id && w.f.worldSerial == w.serial {
		w.f.world = 0
	}
	s.mu.Unlock()
}

// agentMissing is what an agent call yields in a world without the agent
// (a document created before the agent was registered).
const agentMissing = "\u0000bap:agent-missing"

// install puts the page agent in the world.
func (s *Session) install(ctx context.Context, w *world) error {
	ev, err := call(ctx, w.host.sess, runtime.Evaluate, runtime.EvaluateParams{Expression: agentJS, ContextID: w.id, Silent: ptr(true)})
	if err == nil && ev.ExceptionDetails != nil {
		err = fmt.Errorf("installing the page agent: %s", exceptionText(ev.ExceptionDetails))
	}
	if err != nil {
		if isContextGone(err) {
			s.invalidate(w)
			return errWorldGone
		}
		return s.mapErr(err)
	}
	return nil
}

// eval runs an agent expression in the world and decodes its value into out.
func (s *Session) eval(ctx context.Context, w *world, expr string, await bool, out any) error {
	for attempt := 0; ; attempt++ {
		missing, err := s.evalOnce(ctx, w, expr, await, out)
		if err != nil || !missing {
			return err
		}
		if attempt > 0 {
			return errors.New("the page agent could not be installed")
		}
		if err := s.install(ctx, w); err != nil {
			return err
		}
	}
}

func (s *Session) evalOnce(ctx context.Context, w *world, expr string, await bool, out any) (bool, error) {
	p := runtime.EvaluateParams{
		Expression: "globalThis.__bap === undefined ? " + jsonString(agentMissing) + " : (" + expr + ")",
		ContextID:  w.id, ReturnByValue: ptr(true), Silent: ptr(true),
	}
	if await {
		p.AwaitPromise = ptr(true)
	}
	res, err := call(ctx, w.host.sess, runtime.Evaluate, p)
	if err != nil {
		if isContextGone(err) {
			s.invalidate(w)
			return false, errWorldGone
		}
		return false, s.mapErr(err)
	}
	if res.ExceptionDetails != nil {
		return false, fmt.Errorf("page agent: %s", exceptionText(res.ExceptionDetails))
	}
	if res.Result == nil || len(res.Result.Value) == 0 {
		return false, nil
	}
	if res.Result.Type == runtime.RemoteObjectTypeString && strings.Contains(string(res.Result.Value), "bap:agent-missing") {
		var v string
		if jsonv2.Unmarshal(res.Result.Value, &v) == nil && v == agentMissing {
			return true, nil
		}
	}
	if out == nil {
		return false, nil
	}
	return false, jsonv2.Unmarshal(res.Result.Value, out, chromedp.DefaultUnmarshalOptions)
}

// evalJSON is eval for an agent call with a large result (a snapshot): the page serialises it
// with JSON.stringify and the protocol carries one string, which costs a 5,000-element page's
// observe about a ninth less than the protocol's own by-value serialisation of the object.
func (s *Session) evalJSON(ctx context.Context, w *world, expr string, out any) error {
	var text string
	if err := s.eval(ctx, w, "JSON.stringify("+expr+")", false, &text); err != nil {
		return err
	}
	if err := jsonv2.Unmarshal([]byte(text), out, chromedp.DefaultUnmarshalOptions); err != nil {
		return fmt.Errorf("page agent: %w", err)
	}
	return nil
}

// evalObject runs an agent expression and returns the remote object it
// yields (an element), or "" for null.
func (s *Session) evalObject(ctx context.Context, w *world, expr string) (runtime.RemoteObjectID, error) {
	var ok bool
	if err := s.eval(ctx, w, "true", false, &ok); err != nil { // installs the agent when missing
		return "", err
	}
	res, err := call(ctx, w.host.sess, runtime.Evaluate, runtime.EvaluateParams{Expression: expr, ContextID: w.id, Silent: ptr(true)})
	if err != nil {
		if isContextGone(err) {
			s.invalidate(w)
			return "", errWorldGone
		}
		return "", s.mapErr(err)
	}
	if res.ExceptionDetails != nil {
		return "", fmt.Errorf("page agent: %s", exceptionText(res.ExceptionDetails))
	}
	if res.Result == nil {
		return "", nil
	}
	return res.Result.ObjectID, nil
}

// agentCall formats __bap.fn(args…) with JSON arguments.
func agentCall(fn string, args ...any) string { return pagekit.AgentCall(fn, args...) }

// inFrame runs fn with the frame's world, retrying once when the world went
// away because the frame got a new document (then the handle check in fn
// reports staleness).
func (s *Session) inFrame(ctx context.Context, t *tab, f *frameState, fn func(*world) error) error {
	for attempt := 0; ; attempt++ {
		w, err := s.worldOf(ctx, t, f)
		if err == nil {
			err = fn(w)
		}
		if !errors.Is(err, errWorldGone) || attempt >= 2 {
			if errors.Is(err, errWorldGone) {
				return fmt.Errorf("%w: the frame's document changed", ErrStaleNodeHandle)
			}
			return err
		}
	}
}

// frameOwner returns the index, in the parent's world pw, of the iframe
// element that holds frame f.
func (s *Session) frameOwner(ctx context.Context, pw *world, f *frameState) (int, error) {
	s.mu.Lock()
	if f.owner != 0 && f.ownerWorld == pw.serial {
		o := f.owner
		s.mu.Unlock()
		return o, nil
	}
	s.mu.Unlock()
	var ok bool
	if err := s.eval(ctx, pw, "true", false, &ok); err != nil { // installs the agent when missing
		return 0, err
	}
	own, err := call(ctx, pw.host.sess, dom.GetFrameOwner, dom.GetFrameOwnerParams{FrameID: f.id})
	if err != nil {
		return 0, s.mapErr(err)
	}
	rn, err := call(ctx, pw.host.sess, dom.ResolveNode, dom.ResolveNodeParams{BackendNodeID: own.BackendNodeID, ExecutionContextID: pw.id})
	if err != nil {
		return 0, s.mapErr(err)
	}
	if rn.Object == nil || rn.Object.ObjectID == "" {
		return 0, ErrNoSuchNode
	}
	defer fireCmd(pw.host.sess, runtime.ReleaseObject, runtime.ReleaseObjectParams{ObjectID: rn.Object.ObjectID})
	res, err := call(ctx, pw.host.sess, runtime.CallFunctionOn, runtime.CallFunctionOnParams{
		FunctionDeclaration: "function(){return globalThis.__bap.reg(this)}",
		ObjectID:            rn.Object.ObjectID,
		ReturnByValue:       ptr(true),
	})
	if err != nil {
		return 0, s.mapErr(err)
	}
	var idx int
	if res.Result == nil || jsonv2.Unmarshal(res.Result.Value, &idx) != nil || idx == 0 {
		return 0, ErrNoSuchNode
	}
	s.mu.Lock()
	f.owner, f.ownerWorld = idx, pw.serial
	s.mu.Unlock()
	return idx, nil
}

// childFrames returns the frames whose parent is f, in attach order.
func (t *tab) childFramesLocked(f *frameState) []*frameState {
	var out []*frameState
	for _, c := range t.frames {
		if c.parent == f.id && c != f {
			out = append(out, c)
		}
	}
	// Map order is random; keep a stable order (document generation order
	// approximates attach order).
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].doc < out[j-1].doc; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// subtreeLocked returns f and the frames below it in tree order, f first.
func (t *tab) subtreeLocked(f *frameState) []*frameState {
	out := []*frameState{f}
	for _, c := range t.childFramesLocked(f) {
		out = append(out, t.subtreeLocked(c)...)
	}
	return out
}

// frameChain returns f and its ancestors up to the main frame, f first.
func (t *tab) frameChainLocked(f *frameState) []*frameState {
	chain := []*frameState{f}
	for cur := f; cur.parent != ""; {
		p := t.frames[cur.parent]
		if p == nil {
			break
		}
		chain = append(chain, p)
		cur = p
	}
	return chain
}

// deadErr returns ErrSessionLost or ErrSessionClosed when the session is
// gone, else nil.
func (s *Session) deadErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrSessionClosed
	case s.lost != "":
		return fmt.Errorf("%w: %s", ErrSessionLost, s.lost)
	}
	return nil
}

// mapErr turns protocol failures into the package's errors.
func (s *Session) mapErr(err error) error {
	if err == nil {
		return nil
	}
	s.mu.Lock()
	lost, closed := s.lost, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return ErrSessionClosed
	case lost != "":
		return fmt.Errorf("%w: %s", ErrSessionLost, lost)
	case errors.Is(err, errConnClosed):
		return fmt.Errorf("%w: the browser went away", ErrSessionLost)
	case errors.Is(err, errDetached):
		return fmt.Errorf("%w: the frame or tab went away", ErrStaleNodeHandle)
	}
	return err
}

func isContextGone(err error) bool {
	var pe *cdproto.Error
	if errors.As(err, &pe) {
		m := pe.Message
		return strings.Contains(m, "Cannot find context") || strings.Contains(m, "context was destroyed") ||
			strings.Contains(m, "Execution context") || strings.Contains(m, "No frame")
	}
	return errors.Is(err, errDetached)
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d.Exception != nil && d.Exception.Description != "" {
		return clipString(d.Exception.Description, 300)
	}
	return d.Text
}

var _ cdp.Session = (*cdpSession)(nil)
