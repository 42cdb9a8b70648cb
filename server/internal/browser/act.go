package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/pagekit"
)

var knownActions = map[string]bool{
	ActionClick: true, ActionFill: true, ActionClear: true, ActionSelectOption: true, ActionCheck: true,
	ActionUncheck: true, ActionPressKey: true, ActionHover: true, ActionFocus: true,
	ActionScrollIntoView: true, ActionUploadFile: true,
}

// target is the resolved node of an action.
type actTarget struct {
	t   *tab
	rec *handleRec
	f   *frameState
}

// checkResult is the agent's answer to one actionability check.
type checkResult struct {
	St string  `json:"st"`
	X  float64 `json:"x"`
	Y  float64 `json:"y"`
	By string  `json:"by"`
}

type classifyResult struct {
	St     string `json:"st"`
	Effect string `json:"effect"`
	Origin string `json:"origin"`
}

// actWindow remembers the tab's counters when an action starts, to tell what
// the action caused.
type actWindow struct {
	commits, navSignals, stops, blocked, windowOpen, dialogs, downloads, expectDL int
	tabs, subStarted                                                              int
}

func validateAct(req ActRequest) error {
	if !knownActions[req.Action] {
		return fmt.Errorf("%w: unknown action %q", ErrInvalidRequest, req.Action)
	}
	needsTarget := req.Action != ActionPressKey
	if needsTarget && req.NodeID == "" && req.Query == nil {
		return fmt.Errorf("%w: %s needs node_id or query", ErrInvalidRequest, req.Action)
	}
	if req.NodeID != "" && req.Query != nil {
		return fmt.Errorf("%w: give node_id or query, not both", ErrInvalidRequest)
	}
	if req.Query != nil {
		if err := validQuery(*req.Query); err != nil {
			return err
		}
	}
	switch req.Action {
	case ActionSelectOption:
		if req.Value == "" && len(req.Values) == 0 {
			return fmt.Errorf("%w: select_option needs value or values", ErrInvalidRequest)
		}
	case ActionPressKey:
		if _, err := parseKey(req.Key); err != nil {
			return err
		}
	case ActionUploadFile:
		if len(req.Files) == 0 {
			return fmt.Errorf("%w: upload_file needs at least one file", ErrInvalidRequest)
		}
	}
	return nil
}

// resolveTarget finds the node of the request: a handle (checked against
// its epoch) or the best match of a query, waiting (until ctx ends) for a
// query to match something.
func (s *Session) resolveTarget(ctx context.Context, req ActRequest) (*actTarget, error) {
	if req.NodeID != "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		r, f, err := s.reg.lookup(req.NodeID)
		if err != nil {
			return nil, err
		}
		if req.ContextID != "" && req.ContextID != r.tab.id {
			return nil, fmt.Errorf("%w: the node belongs to another browsing context", ErrNoSuchNode)
		}
		return &actTarget{t: r.tab, rec: r, f: f}, nil
	}
	t, err := s.readyTab(ctx, req.ContextID)
	if err != nil {
		return nil, err
	}
	if req.Query == nil {
		return &actTarget{t: t}, nil
	}
	delay := 20 * time.Millisecond
	for {
		s.waitDocument(ctx, t)
		ms, _, err := s.query(ctx, t, *req.Query, 1)
		if err != nil && !errors.Is(err, ErrStaleNodeHandle) {
			if ctx.Err() != nil {
				// The wait ran out while resolving the query: no input was sent.
				return nil, &ActionTimeoutError{Reason: "no element matched the query"}
			}
			return nil, err
		}
		if len(ms) > 0 && ms[0].rec != nil {
			s.mu.Lock()
			r, f, err := s.reg.lookup(ms[0].node.NodeID)
			s.mu.Unlock()
			if err == nil {
				return &actTarget{t: t, rec: r, f: f}, nil
			}
		}
		// Wait for the page to change (a later check may match) with a
		// bounded back-off.
		select {
		case <-ctx.Done():
			return nil, &ActionTimeoutError{Reason: "no element matched the query"}
		case <-time.After(delay):
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// ClassifyAction tells, before dispatch, the effect the action would have:
// form_submission (a click on a submit control, or Enter in a form field),
// file_upload, or any_action; and the origin of the document holding the
// target (for origin-limited approval rules). It resolves the target but
// does not act.
func (s *Session) ClassifyAction(ctx context.Context, req ActRequest) (effect string, origin string, err error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return "", "", err
	}
	defer end()
	if err := validateAct(req); err != nil {
		return "", "", err
	}
	ctx, cancel := withDefaultTimeout(ctx, actTimeout(req))
	defer cancel()
	tg, err := s.resolveTarget(ctx, req)
	if err != nil {
		return "", "", err
	}
	c, err := s.classify(ctx, tg, req)
	if err != nil {
		return "", "", err
	}
	return c.Effect, c.Origin, nil
}

func actTimeout(req ActRequest) time.Duration {
	if req.Timeout > 0 {
		return req.Timeout
	}
	return 30 * time.Second
}

func (s *Session) classify(ctx context.Context, tg *actTarget, req ActRequest) (classifyResult, error) {
	var c classifyResult
	if req.Action == ActionUploadFile {
		c.Effect = EffectFileUpload
	}
	f := tg.f
	idx := 0
	if tg.rec != nil {
		idx = tg.rec.idx
	} else {
		f = tg.t.main
	}
	err := s.inFrame(ctx, tg.t, f, func(w *world) error {
		if err := s.checkWorld(tg, w); err != nil {
			return err
		}
		if idx == 0 {
			// press_key on the focused element.
			return s.eval(ctx, w, "(() => { const a = document.activeElement; return globalThis.__bap.classify(a ? globalThis.__bap.reg(a) : 0, "+jsonString(req.Action)+", "+jsonString(req.Key)+"); })()", false, &c)
		}
		return s.eval(ctx, w, agentCall("classify", idx, req.Action, req.Key), false, &c)
	})
	if err != nil {
		return c, err
	}
	if c.St == "nonode" && idx != 0 {
		return c, fmt.Errorf("%w: the node is no longer in the document", ErrStaleNodeHandle)
	}
	if c.Effect == "" {
		c.Effect = EffectAnyAction
	}
	if req.Action == ActionUploadFile {
		c.Effect = EffectFileUpload
	}
	if c.Origin == "null" {
		c.Origin = ""
	}
	return c, nil
}

// checkWorld verifies that the target's handle still belongs to the world.
func (s *Session) checkWorld(tg *actTarget, w *world) error {
	if tg.rec == nil {
		return nil
	}
	if w.serial != tg.rec.world || w.doc != tg.rec.doc {
		return fmt.Errorf("%w: its document was replaced", ErrStaleNodeHandle)
	}
	return nil
}

// Act carries out one action and reports what it caused: a navigation (the
// call returns after the new document's load), new browsing contexts,
// handled dialogs and downloads. Before acting it waits until the target is
// attached, visible, stable, enabled and receives pointer events (as the
// action needs), else it returns *ActionTimeoutError naming the blocker.
// Value (fill) is protected input: it is never logged.
func (s *Session) Act(ctx context.Context, req ActRequest) (*ActResult, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	if err := validateAct(req); err != nil {
		return nil, err
	}
	timeout := actTimeout(req)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	s.actMu.Lock()
	defer s.actMu.Unlock()

	tg, err := s.resolveTarget(ctx, req)
	if err != nil {
		if s.stopped(ctx) {
			return nil, &StoppedError{}
		}
		return nil, err
	}
	t := tg.t
	c, err := s.classify(ctx, tg, req)
	if err != nil {
		if s.stopped(ctx) {
			return nil, &StoppedError{}
		}
		return nil, err
	}
	if s.stopped(ctx) {
		return nil, &StoppedError{} // stopped before any input
	}
	if req.SecretRef != "" && !pagekit.SecretOriginAllowed(c.Origin, req.SecretOrigins) {
		return nil, &SecretOriginError{Origin: c.Origin} // nothing typed
	}
	s.bringToFront(ctx, t)
	win := s.window(t, req)
	s.mu.Lock()
	s.acting = &actHold{approved: req.Approved, tab: t, win: win} // its non-safe requests may be held (hold.go)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		t.dialogMode, t.promptText = "", ""
		s.acting = nil
		if req.Approved {
			s.approvedUntil = time.Now().Add(approvedGrace)
		}
		s.mu.Unlock()
	}()
	if err := s.perform(ctx, tg, req); err != nil {
		if derr := s.deadErr(); derr != nil {
			return nil, derr
		}
		var ate *ActionTimeoutError
		var se *StoppedError
		if errors.As(err, &ate) || errors.As(err, &se) || errors.Is(err, ErrStaleNodeHandle) || errors.Is(err, ErrInvalidRequest) {
			return nil, err
		}
		if s.stopped(ctx) {
			// Input may have been dispatched: what it did is not known.
			return nil, &StoppedError{Started: true}
		}
		if ctx.Err() != nil {
			return nil, &ActionTimeoutError{Reason: "the action did not complete in time"}
		}
		return nil, s.mapErr(err)
	}
	res := s.settle(ctx, t, tg.f, win, req)
	if derr := s.deadErr(); derr != nil {
		return nil, derr
	}
	if s.stopped(ctx) {
		// Stopped while the page reacted: the action ran; what it started loading stops.
		fireCmd(t.page.sess, page.StopLoading, cdp.Empty{})
	}
	res.Effect = c.Effect
	res.Origin = c.Origin
	return res, nil
}

// bringToFront makes the tab the visible one of its session's window, so
// that animation frames and timers run at full speed in it.
func (s *Session) bringToFront(ctx context.Context, t *tab) {
	s.mu.Lock()
	if s.front == t || len(s.tabs) < 2 {
		s.front = t
		s.mu.Unlock()
		return
	}
	s.front = t
	s.mu.Unlock()
	_, _ = call(ctx, t.page.sess, page.BringToFront, cdp.Empty{})
}

func (s *Session) window(t *tab, req ActRequest) actWindow {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.dialogMode, t.promptText = dialogAnswer(req)
	return actWindow{
		commits: t.commits, navSignals: t.navSignals, stops: t.stops, blocked: t.blocked,
		windowOpen: t.windowOpen, dialogs: len(t.dialogs), downloads: len(t.downloads), tabs: len(s.tabOrder),
		expectDL: t.expectDL, subStarted: t.subStarted,
	}
}

// perform waits for actionability and dispatches the action.
func (s *Session) perform(ctx context.Context, tg *actTarget, req ActRequest) error {
	t := tg.t
	switch req.Action {
	case ActionClick, ActionHover:
		x, y, err := s.actionable(ctx, tg, req.Action)
		if err != nil {
			return err
		}
		if req.Action == ActionHover {
			return s.mapErr(start(ctx, t.page.sess, input.DispatchMouseEvent, input.DispatchMouseEventParams{Type: input.DispatchMouseEventTypeMouseMoved, X: x, Y: y}).wait(ctx, nil))
		}
		return s.click(ctx, t, x, y)
	case ActionCheck, ActionUncheck:
		want := req.Action == ActionCheck
		state, err := s.checkedState(ctx, tg)
		if err != nil {
			return err
		}
		if state == nil {
			return fmt.Errorf("%w: the node is not a checkbox, radio button or switch", ErrInvalidRequest)
		}
		if *state == want {
			return nil
		}
		x, y, err := s.actionable(ctx, tg, req.Action)
		if err != nil {
			return err
		}
		if err := s.click(ctx, t, x, y); err != nil {
			return err
		}
		// Components update their state after the click's handlers (a
		// microtask, a render): wait a bounded time for it to change.
		for _, d := range []time.Duration{0, 16 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond} {
			if d > 0 {
				select {
				case <-ctx.Done():
					return &ActionTimeoutError{Reason: "the checked state did not change in time"}
				case <-time.After(d):
				}
			}
			state, err = s.checkedState(ctx, tg)
			if errors.Is(err, ErrStaleNodeHandle) {
				return nil // the click navigated
			}
			if err != nil {
				return err
			}
			if state == nil || *state == want {
				return nil
			}
		}
		return fmt.Errorf("%w: clicking did not change the checked state", ErrInvalidRequest)
	case ActionFill, ActionClear:
		if _, _, err := s.actionable(ctx, tg, req.Action); err != nil {
			return err
		}
		value := req.Value
		if req.Action == ActionClear {
			value = ""
		}
		var kind string
		if err := s.agent(ctx, tg, "textKind", &kind); err != nil {
			return err
		}
		var st struct {
			St string `json:"st"`
		}
		if req.SecretRef != "" && req.Action == ActionFill {
			return s.fillSecret(ctx, tg, req)
		}
		if value == "" || kind == "value" {
			if err := s.agentArgs(ctx, tg, "setValue", &st, value); err != nil {
				return err
			}
			if st.St == "badvalue" {
				return fmt.Errorf("%w: the field does not accept this value", ErrInvalidRequest)
			}
			return nil
		}
		if err := s.agent(ctx, tg, "selectText", &st); err != nil {
			return err
		}
		return s.mapErr(start(ctx, tg.f.host.sess, input.InsertText, input.InsertTextParams{Text: value}).wait(ctx, nil))
	case ActionSelectOption:
		if _, _, err := s.actionable(ctx, tg, req.Action); err != nil {
			return err
		}
		values := req.Values
		if len(values) == 0 {
			values = []string{req.Value}
		}
		var st struct {
			St      string   `json:"st"`
			Missing []string `json:"missing"`
			Options []string `json:"options"`
		}
		if err := s.agentArgs(ctx, tg, "selectOption", &st, values); err != nil {
			return err
		}
		switch st.St {
		case "ok":
			return nil
		case "notselect":
			return s.selectCustom(ctx, tg, values)
		case "multiple":
			return fmt.Errorf("%w: the select takes one option", ErrInvalidRequest)
		case "missing":
			return fmt.Errorf("%w: no enabled option %q (options: %s)", ErrInvalidRequest, strings.Join(st.Missing, ", "), strings.Join(st.Options, ", "))
		}
		return fmt.Errorf("%w: select_option failed (%s)", ErrInvalidRequest, st.St)
	case ActionPressKey:
		pk, _ := parseKey(req.Key)
		if tg.rec != nil {
			if _, _, err := s.actionable(ctx, tg, ActionFocus); err != nil {
				return err
			}
			var ok bool
			if err := s.agent(ctx, tg, "focus", &ok); err != nil {
				return err
			}
		}
		return s.pressKey(ctx, t.page.sess, pk)
	case ActionFocus:
		if _, _, err := s.actionable(ctx, tg, req.Action); err != nil {
			return err
		}
		var ok bool
		return s.agent(ctx, tg, "focus", &ok)
	case ActionScrollIntoView:
		if _, _, err := s.actionable(ctx, tg, req.Action); err != nil {
			return err
		}
		var ok bool
		return s.agent(ctx, tg, "scrollIntoView", &ok)
	case ActionUploadFile:
		if _, _, err := s.actionable(ctx, tg, req.Action); err != nil {
			return err
		}
		return s.upload(ctx, tg, req.Files)
	}
	return fmt.Errorf("%w: unknown action %q", ErrInvalidRequest, req.Action)
}

// optionWait bounds how long a custom select's option may take to appear
// after its trigger was clicked.
const optionWait = 5 * time.Second

// optionRoles are the roles a component's open popup gives its choices, in
// order of preference: listbox options, then the menu items and radio
// buttons of the menus, popovers and alerts some libraries open instead.
// Before the control is opened only options count, so that an unrelated
// radio button of the page is never taken for a choice.
var optionRoles = []string{"option", "menuitemradio", "menuitem", "radio"}

// selectCustom picks options of a select that is not a <select> (a
// component's combobox or listbox) as a person does: it opens the control
// with a click unless the option is already shown, then clicks the choice
// whose accessible name is the value, for each value in turn.
func (s *Session) selectCustom(ctx context.Context, tg *actTarget, values []string) error {
	for _, v := range values {
		opt, err := s.visibleOption(ctx, tg.t, v, 0, optionRoles[:1])
		if err != nil {
			return err
		}
		if opt == nil {
			x, y, err := s.actionable(ctx, tg, ActionClick)
			if err != nil {
				return err
			}
			if err := s.click(ctx, tg.t, x, y); err != nil {
				return err
			}
			if opt, err = s.visibleOption(ctx, tg.t, v, optionWait, optionRoles); err != nil {
				return err
			}
			if opt == nil {
				return fmt.Errorf("%w: no option %q appeared after opening the control", ErrInvalidRequest, v)
			}
		}
		x, y, err := s.actionable(ctx, opt, ActionClick)
		if err != nil {
			return err
		}
		if err := s.click(ctx, tg.t, x, y); err != nil {
			return err
		}
	}
	return nil
}

// visibleOption finds the choice named v (ignoring case) shown in the tab
// with one of roles, the first role first, waiting up to wait for one to
// appear; nil when none does.
func (s *Session) visibleOption(ctx context.Context, t *tab, v string, wait time.Duration, roles []string) (*actTarget, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	delay := 20 * time.Millisecond
	for {
		for _, role := range roles {
			ms, _, err := s.query(ctx, t, Query{Role: role, Name: v}, 5)
			if err != nil && !errors.Is(err, ErrStaleNodeHandle) {
				return nil, err
			}
			for _, m := range ms {
				if m.rec == nil || !strings.EqualFold(normSpace(m.node.Name), normSpace(v)) || m.node.Disabled != nil && *m.node.Disabled {
					continue
				}
				s.mu.Lock()
				r, f, err := s.reg.lookup(m.node.NodeID)
				s.mu.Unlock()
				if err == nil {
					return &actTarget{t: t, rec: r, f: f}, nil
				}
			}
		}
		select {
		case <-wctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 200*time.Millisecond)
	}
}

// checkedState reads the target's checked state: the DOM's, or the
// browser's accessibility tree's for custom elements and controls inside
// components (nil: the target is not checkable).
func (s *Session) checkedState(ctx context.Context, tg *actTarget) (*bool, error) {
	var st struct {
		St string `json:"st"`
		V  *bool  `json:"v"`
		AX bool   `json:"ax"`
	}
	var ov axState
	err := s.inFrame(ctx, tg.t, tg.f, func(w *world) error {
		if err := s.checkWorld(tg, w); err != nil {
			return err
		}
		if err := s.eval(ctx, w, agentCall("checkedState", tg.rec.idx), false, &st); err != nil {
			return err
		}
		if !st.AX {
			return nil
		}
		states, err := s.axStates(ctx, w, []int{tg.rec.idx})
		ov = states[tg.rec.idx]
		return err
	})
	if err != nil {
		return nil, err
	}
	if st.St == "nonode" {
		return nil, fmt.Errorf("%w: the node is no longer in the document", ErrStaleNodeHandle)
	}
	switch {
	case ov.Ch != nil:
		return ptr(*ov.Ch == 1), nil
	case ov.Pr != nil:
		return ptr(*ov.Pr == 1), nil
	}
	return st.V, nil
}

// agent calls an agent function on the target element.
func (s *Session) agent(ctx context.Context, tg *actTarget, fn string, out any) error {
	return s.agentArgs(ctx, tg, fn, out)
}

func (s *Session) agentArgs(ctx context.Context, tg *actTarget, fn string, out any, extra ...any) error {
	return s.inFrame(ctx, tg.t, tg.f, func(w *world) error {
		if err := s.checkWorld(tg, w); err != nil {
			return err
		}
		return s.eval(ctx, w, agentCall(fn, append([]any{tg.rec.idx}, extra...)...), false, out)
	})
}

// actionable waits until the target can take the action and returns the
// point to use, in the tab's top-level viewport.
func (s *Session) actionable(ctx context.Context, tg *actTarget, action string) (float64, float64, error) {
	delays := []time.Duration{0, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond}
	reason := "not checked"
	for i := 0; ; i++ {
		x, y, st, err := s.checkOnce(ctx, tg, action)
		if err != nil {
			if s.stopped(ctx) {
				return 0, 0, &StoppedError{} // no input was sent yet
			}
			if ctx.Err() != nil {
				return 0, 0, &ActionTimeoutError{Reason: reason}
			}
			return 0, 0, err
		}
		if st == "ok" {
			return x, y, nil
		}
		if r, final := blockerText(st); final {
			return 0, 0, fmt.Errorf("%w: %s", ErrInvalidRequest, r)
		} else {
			reason = r
		}
		d := 500 * time.Millisecond
		if i < len(delays) {
			d = delays[i]
		}
		select {
		case <-ctx.Done():
			if s.stopped(ctx) {
				return 0, 0, &StoppedError{}
			}
			return 0, 0, &ActionTimeoutError{Reason: reason}
		case <-time.After(d):
		}
	}
}

// blockerText names a failed check; final is true for a check that waiting
// cannot fix.
func blockerText(st string) (string, bool) {
	switch {
	case st == "hidden":
		return "not visible", false
	case st == "disabled":
		return "disabled", false
	case st == "unstable":
		return "not stable (moving or animating)", false
	case st == "offscreen":
		return "outside the viewport", false
	case st == "readonly":
		return "read-only", false
	case strings.HasPrefix(st, "covered"):
		return st, false
	case st == "noteditable":
		return "the node is not an editable field", true
	}
	return st, false
}

// checkOnce runs one actionability check, through the frame chain.
func (s *Session) checkOnce(ctx context.Context, tg *actTarget, action string) (x, y float64, st string, err error) {
	var r checkResult
	err = s.inFrame(ctx, tg.t, tg.f, func(w *world) error {
		if err := s.checkWorld(tg, w); err != nil {
			return err
		}
		return s.eval(ctx, w, agentCall("check", tg.rec.idx, action), true, &r)
	})
	if err != nil {
		return 0, 0, "", err
	}
	switch r.St {
	case "nonode", "detached":
		return 0, 0, "", fmt.Errorf("%w: the node is no longer in the document", ErrStaleNodeHandle)
	case "ok":
	case "covered":
		return 0, 0, "covered by another element (" + r.By + ")", nil
	default:
		return 0, 0, r.St, nil
	}
	x, y, cov, err := s.toTopViewport(ctx, tg, r.X, r.Y, action == ActionClick || action == ActionHover)
	if err != nil {
		return 0, 0, "", err
	}
	if cov != "" {
		return 0, 0, "covered by another element (" + cov + ")", nil
	}
	return x, y, "ok", nil
}

// toTopViewport maps the point (x, y) of the target's frame viewport to the tab's viewport: it
// walks up the frame chain adding each iframe's offset. With hit, it also checks in each parent
// document that the point lands in the iframe, and names what covers it when it does not.
func (s *Session) toTopViewport(ctx context.Context, tg *actTarget, x, y float64, hit bool) (float64, float64, string, error) {
	s.mu.Lock()
	chain := tg.t.frameChainLocked(tg.f)
	s.mu.Unlock()
	for i := 0; i+1 < len(chain); i++ {
		child, parent := chain[i], chain[i+1]
		var fb struct {
			St  string  `json:"st"`
			X   float64 `json:"x"`
			Y   float64 `json:"y"`
			Cov string  `json:"cov"`
		}
		err := s.inFrame(ctx, tg.t, parent, func(w *world) error {
			owner, err := s.frameOwner(ctx, w, child)
			if err != nil {
				return err
			}
			if hit {
				return s.eval(ctx, w, agentCall("frameBox", owner, x, y), false, &fb)
			}
			return s.eval(ctx, w, agentCall("frameBox", owner), false, &fb)
		})
		if err != nil {
			return 0, 0, "", err
		}
		if fb.St != "ok" {
			return 0, 0, "", fmt.Errorf("%w: the frame is no longer in the document", ErrStaleNodeHandle)
		}
		if hit && fb.Cov != "" {
			return 0, 0, fb.Cov, nil
		}
		x += fb.X
		y += fb.Y
	}
	return x, y, "", nil
}

// click presses and releases the left button at the point.
func (s *Session) click(ctx context.Context, t *tab, x, y float64) error {
	sess := t.page.sess
	fs := []*future{
		start(ctx, sess, input.DispatchMouseEvent, input.DispatchMouseEventParams{Type: input.DispatchMouseEventTypeMouseMoved, X: x, Y: y}),
		start(ctx, sess, input.DispatchMouseEvent, input.DispatchMouseEventParams{Type: input.DispatchMouseEventTypeMousePressed, X: x, Y: y, Button: input.MouseButtonLeft, Buttons: 1, ClickCount: 1}),
		start(ctx, sess, input.DispatchMouseEvent, input.DispatchMouseEventParams{Type: input.DispatchMouseEventTypeMouseReleased, X: x, Y: y, Button: input.MouseButtonLeft, ClickCount: 1}),
	}
	return s.mapErr(waitAll(ctx, fs...))
}

// upload stages the files in the session's directory and sets them on the
// file input.
func (s *Session) upload(ctx context.Context, tg *actTarget, files []File) error {
	dir := filepath.Join(s.upDir, ids.New(ids.Artifact))
	if err := s.ps.p.mkdirBap(dir); err != nil {
		return err
	}
	var paths []string
	seen := map[string]int{}
	for _, f := range files {
		name := safeName(f.Name)
		if n := seen[name]; n > 0 {
			name = fmt.Sprintf("%d-%s", n, name)
		}
		seen[safeName(f.Name)]++
		p := filepath.Join(dir, name)
		if err := s.ps.p.writeUpload(p, f.Content); err != nil {
			return err
		}
		paths = append(paths, p)
	}
	return s.inFrame(ctx, tg.t, tg.f, func(w *world) error {
		if err := s.checkWorld(tg, w); err != nil {
			return err
		}
		obj, err := s.evalObject(ctx, w, agentCall("fileInput", tg.rec.idx))
		if err != nil {
			return err
		}
		if obj == "" {
			return fmt.Errorf("%w: the node is not a file input (or the label of one)", ErrInvalidRequest)
		}
		defer fireCmd(w.host.sess, runtime.ReleaseObject, runtime.ReleaseObjectParams{ObjectID: obj})
		_, err = call(ctx, w.host.sess, dom.SetFileInputFiles, dom.SetFileInputFilesParams{Files: paths, ObjectID: obj})
		return s.mapErr(err)
	})
}

// settle waits for what the action set in motion (a navigation of the
// page or of any of its frames to load, popups to attach, downloads to
// finish) and reports it. f is the frame the action targeted (nil: the
// main frame).
func (s *Session) settle(ctx context.Context, t *tab, f *frameState, win actWindow, req ActRequest) *ActResult {
	// Unless the action already started a navigation, one round trip
	// through the page's event loop, so that a navigation or window.open the
	// action scheduled has been started.
	s.mu.Lock()
	started := t.navSignals > win.navSignals || t.commits > win.commits
	sub := f != nil && f != t.main && t.subStarted == win.subStarted
	s.mu.Unlock()
	if sub {
		// The same for the target's own frame: a form it submits schedules
		// the frame's navigation in its own event loop.
		_ = s.inFrame(ctx, t, f, func(w *world) error {
			if err := s.eval(ctx, w, "new Promise(r => setTimeout(r, 0))", true, nil); err != nil {
				return err
			}
			return w.host.sess.drain(ctx)
		})
	}
	if !started {
		evalErr := s.inFrame(ctx, t, t.main, func(w *world) error {
			return s.eval(ctx, w, "new Promise(r => setTimeout(r, 0))", true, nil)
		})
		// The events that round trip caused (a document.open, a navigation
		// start) may still be queued: take them in before deciding. Its reply
		// marks them, unless it failed before reaching the browser.
		s.mu.Lock()
		var host *cdpSession
		if t.main != nil {
			host = t.main.host.sess
		}
		s.mu.Unlock()
		switch {
		case host == nil:
		case evalErr == nil:
			_ = host.drain(ctx)
		default:
			_ = host.sync(ctx)
		}
	}
	life := "load"
	_ = s.waitFor(ctx, func() bool {
		if t.closed {
			return true
		}
		// A held request ends the wait: what it would cause waits for its approval.
		return s.hold != nil || s.mainSettledLocked(t, win, life) && s.framesSettledLocked(t, win)
	})
	// Popups the action opened are reported once attached (a popup the
	// browser blocked never comes: wait a bounded time).
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_ = s.waitFor(pctx, func() bool {
		return t.closed || s.hold != nil || s.openedSinceLocked(t, win) >= t.windowOpen-win.windowOpen
	})
	cancel()
	s.awaitLateRequests(ctx, req) // hold.go
	s.mu.Lock()
	defer s.mu.Unlock()
	res := &ActResult{ContextID: t.id, EpochID: t.epoch, Navigated: t.commits > win.commits, Held: s.heldNowLocked()}
	if t.main != nil {
		res.URL = t.main.url
	}
	for _, nt := range s.tabOrder[min(win.tabs, len(s.tabOrder)):] {
		if nt.opener == t.id {
			res.NewContexts = append(res.NewContexts, nt.id)
		}
	}
	if len(t.dialogs) > win.dialogs {
		res.Dialogs = append([]Dialog(nil), t.dialogs[win.dialogs:]...)
	}
	dls := append([]*download(nil), t.downloads[min(win.downloads, len(t.downloads)):]...)
	if len(dls) > 0 {
		s.mu.Unlock()
		for _, d := range dls {
			res.Downloads = append(res.Downloads, d.collect(ctx, s.b.cfg.MaxDownloadBytes))
		}
		s.mu.Lock()
	}
	return res
}

// mainSettledLocked tells whether what the action did to the main frame is
// over: no navigation started, or it was refused or stopped, or its new
// document reached life.
func (s *Session) mainSettledLocked(t *tab, win actWindow, life string) bool {
	if t.navSignals == win.navSignals && t.commits == win.commits {
		return true
	}
	if t.blocked > win.blocked && t.commits == win.commits {
		return true // refused by the policy; the document stays
	}
	if t.commits == win.commits {
		for _, d := range t.dialogs[win.dialogs:] {
			if d.Type == "beforeunload" && !d.Accepted {
				return true // the page was told to stay
			}
		}
		// No new document (yet): done when the navigation stopped,
		// once the downloads it turned into have begun.
		return t.stops > win.stops && len(t.downloads)-win.downloads >= t.expectDL-win.expectDL
	}
	m := t.main
	return m.life[m.loader][life]
}

// framesSettledLocked tells whether the subframe navigations the action
// started are over: each frame stopped loading (its new document loaded, or
// the navigation was refused or failed) or went away.
func (s *Session) framesSettledLocked(t *tab, win actWindow) bool {
	if t.subStarted == win.subStarted {
		return true
	}
	for _, f := range t.frames {
		if f != t.main && f.navPending {
			return false
		}
	}
	return true
}

// openedSinceLocked counts the tabs opened by t since the window began.
func (s *Session) openedSinceLocked(t *tab, win actWindow) int {
	n := 0
	for _, nt := range s.tabOrder[min(win.tabs, len(s.tabOrder)):] {
		if nt.opener == t.id {
			n++
		}
	}
	return n
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// dialogAnswer is how the action's dialogs are answered: dismissed (the
// default of CONTRACT; page.ActRequest has no field to ask otherwise yet).
func dialogAnswer(ActRequest) (mode, promptText string) { return "", "" }

// fillSecret types a secret into the target field: set in the field's own world (bound to its
// document: a navigated frame makes the handle stale, never retargets the value), then marked so
// that observations read the reference and screenshots draw it masked. Only text controls
// (input, textarea) take a secret.
func (s *Session) fillSecret(ctx context.Context, tg *actTarget, req ActRequest) error {
	var st struct {
		St string `json:"st"`
	}
	if err := s.agentArgs(ctx, tg, "markSecret", &st, req.SecretRef); err != nil {
		return err
	}
	if st.St != "ok" {
		return fmt.Errorf("%w: a secret fills only a text field", ErrInvalidRequest)
	}
	if err := s.agentArgs(ctx, tg, "setValue", &st, req.Value); err != nil {
		return err
	}
	if st.St == "badvalue" {
		return fmt.Errorf("%w: the field does not accept this value", ErrInvalidRequest)
	}
	return nil
}
