package firefox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
)

// knownActions are the spec's actions this adapter carries out.
var knownActions = map[string]bool{
	page.ActionClick: true, page.ActionFill: true, page.ActionClear: true, page.ActionSelectOption: true,
	page.ActionCheck: true, page.ActionUncheck: true, page.ActionPressKey: true, page.ActionHover: true,
	page.ActionFocus: true, page.ActionScrollIntoView: true, page.ActionUploadFile: true,
}

// target is the resolved node of an action (idx 0: none, press_key on the focused element).
type target struct {
	doc string
	idx int
}

func validateAct(req page.ActRequest) error {
	if !knownActions[req.Action] {
		return fmt.Errorf("%w: unknown action %q", page.ErrInvalidRequest, req.Action)
	}
	if req.Action != page.ActionPressKey && req.NodeID == "" && req.Query == nil {
		return fmt.Errorf("%w: %s needs node_id or query", page.ErrInvalidRequest, req.Action)
	}
	if req.NodeID != "" && req.Query != nil {
		return fmt.Errorf("%w: give node_id or query, not both", page.ErrInvalidRequest)
	}
	if req.Query != nil {
		if err := validQuery(*req.Query); err != nil {
			return err
		}
	}
	switch req.Action {
	case page.ActionSelectOption:
		if req.Value == "" && len(req.Values) == 0 {
			return fmt.Errorf("%w: select_option needs value or values", page.ErrInvalidRequest)
		}
	case page.ActionPressKey:
		if _, err := parseKey(req.Key); err != nil {
			return err
		}
	case page.ActionUploadFile:
		if len(req.Files) == 0 {
			return fmt.Errorf("%w: upload_file needs at least one file", page.ErrInvalidRequest)
		}
	}
	return nil
}

func actTimeout(req page.ActRequest) time.Duration {
	if req.Timeout > 0 {
		return req.Timeout
	}
	return commandTimeout
}

// resolve finds the request's node: its handle, or the best match of its query (waiting, until
// ctx ends, for the query to match).
func (s *Session) resolve(ctx context.Context, req page.ActRequest) (target, error) {
	if err := s.checkContext(req.ContextID); err != nil {
		return target{}, err
	}
	if req.NodeID != "" {
		h, err := s.lookup(req.NodeID)
		return target(h), err
	}
	if req.Query == nil {
		return target{}, nil
	}
	delay := 20 * time.Millisecond
	for {
		nodes, _, err := s.query(ctx, *req.Query, 1)
		if err != nil && !errors.Is(err, page.ErrStaleNodeHandle) {
			if ctx.Err() != nil {
				return target{}, &page.ActionTimeoutError{Reason: "no element matched the query"}
			}
			return target{}, err
		}
		if len(nodes) > 0 && nodes[0].NodeID != "" {
			if h, err := s.lookup(nodes[0].NodeID); err == nil {
				return target(h), nil
			}
		}
		select {
		case <-ctx.Done():
			return target{}, &page.ActionTimeoutError{Reason: "no element matched the query"}
		case <-time.After(delay):
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

type classifyResult struct {
	St     string `json:"st"`
	Effect string `json:"effect"`
	Origin string `json:"origin"`
}

// classify tells the effect the action would have and the origin of the target's document.
func (s *Session) classify(ctx context.Context, tg target, req page.ActRequest) (classifyResult, error) {
	var c classifyResult
	var err error
	if tg.idx == 0 {
		_, err = s.agentIn(ctx, "", &c, "classify", 0, req.Action, req.Key)
	} else {
		_, err = s.agentIn(ctx, tg.doc, &c, "classify", tg.idx, req.Action, req.Key)
	}
	if err != nil {
		return c, err
	}
	if c.St == "nonode" && tg.idx != 0 {
		return c, fmt.Errorf("%w: the node is no longer in the document", page.ErrStaleNodeHandle)
	}
	if c.Effect == "" {
		c.Effect = page.EffectAnyAction
	}
	if req.Action == page.ActionUploadFile {
		c.Effect = page.EffectFileUpload
	}
	if c.Origin == "null" {
		c.Origin = ""
	}
	return c, nil
}

// ClassifyAction tells, before dispatch, the effect the action would have and the origin of the
// document holding its target; it resolves the target but does not act.
func (s *Session) ClassifyAction(ctx context.Context, req page.ActRequest) (string, string, error) {
	if err := s.check(); err != nil {
		return "", "", err
	}
	if t, err := s.route(req.ContextID, firstOf(req.NodeID, queryNode(req.Query))); err != nil {
		return "", "", err
	} else if t != s {
		return t.ClassifyAction(ctx, req)
	}
	if err := validateAct(req); err != nil {
		return "", "", err
	}
	ctx, cancel := withTimeout(ctx, actTimeout(req))
	defer cancel()
	tg, err := s.resolve(ctx, req)
	if err != nil {
		return "", "", err
	}
	c, err := s.classify(ctx, tg, req)
	return c.Effect, c.Origin, err
}

// Act carries out one action as a user would (pointer and keyboard through
// input.performActions) once its target is actionable, and reports whether it navigated. Value
// (fill) is protected input: it is never logged.
func (s *Session) Act(ctx context.Context, req page.ActRequest) (*page.ActResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if t, err := s.route(req.ContextID, firstOf(req.NodeID, queryNode(req.Query))); err != nil {
		return nil, err
	} else if t != s {
		return t.Act(ctx, req)
	}
	s.setFront(s)
	if err := validateAct(req); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, actTimeout(req))
	defer cancel()
	s.actMu.Lock()
	defer s.actMu.Unlock()
	tg, err := s.resolve(ctx, req)
	if err != nil {
		return nil, err
	}
	c, err := s.classify(ctx, tg, req)
	if err != nil {
		return nil, err
	}
	if req.SecretRef != "" && !pagekit.SecretOriginAllowed(c.Origin, req.SecretOrigins) {
		return nil, &page.SecretOriginError{Origin: c.Origin} // nothing typed
	}
	s.mu.Lock()
	doc0, started0, dialogs0, opened0 := s.docs.doc, s.navStarted, len(s.dialogs), len(s.opened)
	s.mu.Unlock()
	m := s.first() // holds are the session's, whichever tab acts
	m.mu.Lock()
	m.acting = &actHold{approved: req.Approved, tab: s, doc0: doc0, started0: started0} // its non-safe requests may be held (hold.go)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.acting = nil
		if req.Approved {
			m.approvedUntil = time.Now().Add(pagekit.ApprovedGrace)
		}
		m.mu.Unlock()
	}()
	if err := s.perform(ctx, tg, req); err != nil {
		if err := s.check(); err != nil {
			return nil, err
		}
		var ate *page.ActionTimeoutError
		if errors.As(err, &ate) || errors.Is(err, page.ErrStaleNodeHandle) || errors.Is(err, page.ErrInvalidRequest) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, &page.ActionTimeoutError{Reason: "the action did not complete in time"}
		}
		return nil, s.mapErr(err)
	}
	res, err := s.settle(ctx, doc0, started0)
	if err != nil {
		return nil, err
	}
	s.awaitLateRequests(ctx, req) // hold.go
	res.Held = s.heldNow(ctx)
	res.Effect, res.Origin = c.Effect, c.Origin
	s.mu.Lock()
	if len(s.dialogs) > dialogs0 {
		res.Dialogs = append([]page.Dialog(nil), s.dialogs[dialogs0:]...)
	}
	// The tabs the input opened: their contextCreated events came before the settle's answers
	// from the page (the tab is created while the page's window.open or link click runs).
	if len(s.opened) > opened0 {
		res.NewContexts = append([]string(nil), s.opened[opened0:]...)
	}
	s.mu.Unlock()
	return res, nil
}

// settleWait bounds how long an act waits for the document it may have started loading.
const settleWait = 10 * time.Second

// frameWait bounds the wait for the frames after an input.
const frameWait = 300 * time.Millisecond

// noteNavigation records that a navigation of the tab started or ended: the tab's navigation
// events are numbered, and the tab is settled when its latest is an end (a redirect can start a
// navigation twice and load it once).
func (s *Session) noteNavigation(started bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.navSeq++
	if started {
		s.navStarted++
		s.navLastStart = s.navSeq
	} else {
		s.navLastEnd = s.navSeq
	}
	s.notifyLocked()
}

// maxDialogMessage bounds a dialog's message as the CDP adapter bounds it.
const maxDialogMessage = 2000

// notePrompt records a dialog the tab's user context answered (dismissed, a beforeunload
// accepted) and reports it as the CDP adapter does.
func (s *Session) notePrompt(ev bidi.BrowsingContextUserPromptOpenedParameters) {
	d := page.Dialog{Type: string(ev.Type), Message: pagekit.Clip(ev.Message, maxDialogMessage),
		Accepted: ev.Handler == bidi.SessionUserPromptHandlerTypeAccept}
	s.mu.Lock()
	s.dialogs = append(s.dialogs, d)
	url := s.docs.url
	s.mu.Unlock()
	s.emit(page.Event{Type: page.EventDialogHandled, ContextID: s.ctxID, URL: url, Data: map[string]any{
		"dialog_type": d.Type, "message": d.Message, "accepted": d.Accepted, // the spelling of DialogHandledData
	}})
}

// navState is how many navigations of the tab started, whether the latest has ended, and the
// channel of the next change.
func (s *Session) navState() (started int, ended bool, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.navStarted, s.navLastEnd > s.navLastStart, s.navCh
}

// settle waits until a navigation the action started (navigations counted past started0) has
// ended and its document is loaded, and reports it.
func (s *Session) settle(ctx context.Context, doc0 string, started0 int) (*page.ActResult, error) {
	wctx, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	// A navigation the input started begins within a few frames; then wait for its load. A
	// document that goes away while the frame wait runs never answers it: bounded apart.
	fctx, fcancel := context.WithTimeout(wctx, frameWait)
	_, _ = s.evaluate(fctx, `new Promise(r => requestAnimationFrame(() => setTimeout(() => r(""), 50)))`, true)
	fcancel()
	for {
		started, ended, changed := s.navState()
		if started == started0 || ended || s.holding() {
			break // a held request ends the wait: what it would cause waits for its approval
		}
		select {
		case <-wctx.Done():
		case <-changed:
			continue
		}
		break
	}
	for {
		v, err := s.evaluate(wctx, `document.readyState`, false)
		if err == nil && v == "complete" || s.holding() {
			break
		}
		if wctx.Err() != nil {
			break
		}
		select {
		case <-wctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	cur, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	navigated := s.docs.doc != doc0
	s.mu.Unlock()
	res := &page.ActResult{ContextID: s.ctxID, EpochID: cur.EpochID, Navigated: navigated}
	if navigated {
		res.URL = cur.URL
	}
	return res, nil
}

type checkResult struct {
	St string  `json:"st"`
	X  float64 `json:"x"`
	Y  float64 `json:"y"`
	By string  `json:"by"`
}

// actionable waits until the target can take the action and returns the viewport point to use.
func (s *Session) actionable(ctx context.Context, tg target, action string) (float64, float64, error) {
	delays := []time.Duration{0, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond}
	reason := "not checked"
	for i := 0; ; i++ {
		var r checkResult
		_, err := s.agentIn(ctx, tg.doc, &r, "check", tg.idx, action)
		if err != nil {
			if ctx.Err() != nil {
				return 0, 0, &page.ActionTimeoutError{Reason: reason}
			}
			return 0, 0, err
		}
		if r.St == "ok" {
			// A node of a frame: its point in the tab's viewport, and nothing of a parent
			// document over the iframe there.
			_, _, cov, err := s.toTop(ctx, tg.doc, r.X, r.Y, action == page.ActionClick || action == page.ActionHover)
			if err != nil {
				return 0, 0, err
			}
			if cov == "" {
				return r.X, r.Y, nil // the input goes to the node's frame (inputTo)
			}
			r.St, r.By = "covered", cov
		}
		switch r.St {
		case "nonode", "detached":
			return 0, 0, fmt.Errorf("%w: the node is no longer in the document", page.ErrStaleNodeHandle)
		case "covered":
			reason = "covered by another element (" + r.By + ")"
		case "noteditable":
			return 0, 0, fmt.Errorf("%w: the node is not an editable field", page.ErrInvalidRequest)
		default:
			reason = blocker(r.St)
		}
		d := 500 * time.Millisecond
		if i < len(delays) {
			d = delays[i]
		}
		select {
		case <-ctx.Done():
			return 0, 0, &page.ActionTimeoutError{Reason: reason}
		case <-time.After(d):
		}
	}
}

// blocker names a failed check as the CDP adapter does.
func blocker(st string) string {
	switch st {
	case "hidden":
		return "not visible"
	case "unstable":
		return "not stable (moving or animating)"
	case "offscreen":
		return "outside the viewport"
	case "readonly":
		return "read-only"
	}
	return st
}

// perform waits for actionability and dispatches the action.
func (s *Session) perform(ctx context.Context, tg target, req page.ActRequest) error {
	ctx = inputTo(ctx, s.frameOf(tg.doc))
	var st struct {
		St      string   `json:"st"`
		V       *bool    `json:"v"`
		Missing []string `json:"missing"`
		Options []string `json:"options"`
	}
	switch req.Action {
	case page.ActionClick, page.ActionHover:
		x, y, err := s.actionable(ctx, tg, req.Action)
		if err != nil {
			return err
		}
		if req.Action == page.ActionHover {
			return s.pointer(ctx, x, y, false)
		}
		return s.pointer(ctx, x, y, true)
	case page.ActionCheck, page.ActionUncheck:
		want := req.Action == page.ActionCheck
		if _, err := s.agentIn(ctx, tg.doc, &st, "checkedState", tg.idx); err != nil {
			return err
		}
		if st.St == "nonode" {
			return fmt.Errorf("%w: the node is no longer in the document", page.ErrStaleNodeHandle)
		}
		if st.V == nil {
			return fmt.Errorf("%w: the node is not a checkbox, radio button or switch", page.ErrInvalidRequest)
		}
		if *st.V == want {
			return nil
		}
		x, y, err := s.actionable(ctx, tg, req.Action)
		if err != nil {
			return err
		}
		if err := s.pointer(ctx, x, y, true); err != nil {
			return err
		}
		for _, d := range []time.Duration{0, 16 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond} {
			select {
			case <-ctx.Done():
				return &page.ActionTimeoutError{Reason: "the checked state did not change in time"}
			case <-time.After(d):
			}
			st.V = nil
			_, err := s.agentIn(ctx, tg.doc, &st, "checkedState", tg.idx)
			if errors.Is(err, page.ErrStaleNodeHandle) {
				return nil // the click navigated
			}
			if err != nil {
				return err
			}
			if st.V == nil || *st.V == want {
				return nil
			}
		}
		return fmt.Errorf("%w: clicking did not change the checked state", page.ErrInvalidRequest)
	case page.ActionFill, page.ActionClear:
		if _, _, err := s.actionable(ctx, tg, req.Action); err != nil {
			return err
		}
		value := req.Value
		if req.Action == page.ActionClear {
			value = ""
		}
		var kind string
		if _, err := s.agentIn(ctx, tg.doc, &kind, "textKind", tg.idx); err != nil {
			return err
		}
		if req.SecretRef != "" && req.Action == page.ActionFill {
			return s.fillSecret(ctx, tg, req)
		}
		if value == "" || kind == "value" {
			if _, err := s.agentIn(ctx, tg.doc, &st, "setValue", tg.idx, value); err != nil {
				return err
			}
			if st.St == "badvalue" {
				return fmt.Errorf("%w: the field does not accept this value", page.ErrInvalidRequest)
			}
			return nil
		}
		if _, err := s.agentIn(ctx, tg.doc, &st, "selectText", tg.idx); err != nil {
			return err
		}
		return s.typeText(ctx, value)
	case page.ActionSelectOption:
		if _, _, err := s.actionable(ctx, tg, req.Action); err != nil {
			return err
		}
		values := req.Values
		if len(values) == 0 {
			values = []string{req.Value}
		}
		if _, err := s.agentIn(ctx, tg.doc, &st, "selectOption", tg.idx, values); err != nil {
			return err
		}
		switch st.St {
		case "ok":
			return nil
		case "notselect":
			return s.selectCustom(ctx, tg, values)
		case "multiple":
			return fmt.Errorf("%w: the select takes one option", page.ErrInvalidRequest)
		case "missing":
			return fmt.Errorf("%w: no enabled option %q (options: %s)", page.ErrInvalidRequest, strings.Join(st.Missing, ", "), strings.Join(st.Options, ", "))
		}
		return fmt.Errorf("%w: select_option failed (%s)", page.ErrInvalidRequest, st.St)
	case page.ActionPressKey:
		keys, _ := parseKey(req.Key)
		if tg.idx != 0 {
			if _, _, err := s.actionable(ctx, tg, page.ActionFocus); err != nil {
				return err
			}
			var ok bool
			if _, err := s.agentIn(ctx, tg.doc, &ok, "focus", tg.idx); err != nil {
				return err
			}
		}
		return s.keys(ctx, keys)
	case page.ActionUploadFile:
		if _, _, err := s.actionable(ctx, tg, req.Action); err != nil {
			return err
		}
		return s.upload(ctx, tg, req.Files)
	case page.ActionFocus, page.ActionScrollIntoView:
		if _, _, err := s.actionable(ctx, tg, req.Action); err != nil {
			return err
		}
		fn := "focus"
		if req.Action == page.ActionScrollIntoView {
			fn = "scrollIntoView"
		}
		var ok bool
		_, err := s.agentIn(ctx, tg.doc, &ok, fn, tg.idx)
		return err
	}
	return fmt.Errorf("%w: unknown action %q", page.ErrInvalidRequest, req.Action)
}

// optionWait bounds how long a custom select's option may take to appear after its trigger was
// clicked (the CDP adapter's bound).
const optionWait = 5 * time.Second

// optionRoles are the roles a component's open popup gives its choices, in the CDP adapter's
// order of preference: listbox options, then the menu items and radio buttons some libraries open
// instead. Before the control is opened only options count, so that an unrelated radio button of
// the page is never taken for a choice.
var optionRoles = []string{"option", "menuitemradio", "menuitem", "radio"}

// selectCustom picks options of a select that is not a <select> (a component's combobox or
// listbox) as a person does, and as the CDP adapter does: for each value in turn it opens the
// control with a click unless the option is already shown, then clicks the enabled choice whose
// accessible name is the value.
func (s *Session) selectCustom(ctx context.Context, tg target, values []string) error {
	for _, v := range values {
		opt, err := s.shownOption(ctx, v, 0, optionRoles[:1])
		if err != nil {
			return err
		}
		if opt == nil {
			x, y, err := s.actionable(ctx, tg, page.ActionClick)
			if err != nil {
				return err
			}
			if err := s.pointer(ctx, x, y, true); err != nil {
				return err
			}
			if opt, err = s.shownOption(ctx, v, optionWait, optionRoles); err != nil {
				return err
			}
			if opt == nil {
				return fmt.Errorf("%w: no option %q appeared after opening the control", page.ErrInvalidRequest, v)
			}
		}
		octx := inputTo(ctx, s.frameOf(opt.doc)) // the option's frame, which may not be the control's
		x, y, err := s.actionable(octx, *opt, page.ActionClick)
		if err != nil {
			return err
		}
		if err := s.pointer(octx, x, y, true); err != nil {
			return err
		}
	}
	return nil
}

// shownOption finds the enabled choice named v (ignoring case and runs of white space) with one
// of roles, the first role first, waiting up to wait for one to appear; nil when none does.
func (s *Session) shownOption(ctx context.Context, v string, wait time.Duration, roles []string) (*target, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	want := strings.Join(strings.Fields(v), " ")
	delay := 20 * time.Millisecond
	for {
		for _, role := range roles {
			nodes, _, err := s.query(ctx, page.Query{Role: role, Name: v}, 5)
			if err != nil && !errors.Is(err, page.ErrStaleNodeHandle) {
				return nil, err
			}
			for _, n := range nodes {
				if n.NodeID == "" || !strings.EqualFold(strings.Join(strings.Fields(n.Name), " "), want) || n.Disabled != nil && *n.Disabled {
					continue
				}
				if h, err := s.lookup(n.NodeID); err == nil {
					return &target{doc: h.doc, idx: h.idx}, nil
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

// fillSecret types a secret into the target field as the CDP adapter does: set in the agent's
// sandbox (bound to the target's document: a navigation makes the handle stale, never retargets
// the value), the field marked there so that observations read the reference. Only text
// controls (input, textarea) take a secret.
func (s *Session) fillSecret(ctx context.Context, tg target, req page.ActRequest) error {
	var st struct {
		St string `json:"st"`
	}
	if _, err := s.agentIn(ctx, tg.doc, &st, "markSecret", tg.idx, req.SecretRef); err != nil {
		return err
	}
	if st.St != "ok" {
		return fmt.Errorf("%w: a secret fills only a text field", page.ErrInvalidRequest)
	}
	if _, err := s.agentIn(ctx, tg.doc, &st, "setValue", tg.idx, req.Value); err != nil {
		return err
	}
	if st.St == "badvalue" {
		return fmt.Errorf("%w: the field does not accept this value", page.ErrInvalidRequest)
	}
	return nil
}

// upload stages the files where the browser can read them (kept until the session closes: the
// page reads them when it submits) and sets them on the target's file input with input.setFiles,
// which fires its input and change events as a person's choice would.
func (s *Session) upload(ctx context.Context, tg target, files []page.File) error {
	d := s.e.drv
	if d == nil {
		return fmt.Errorf("%w: upload_file on a session without its browser", ErrUnsupported)
	}
	frame := s.frameOf(tg.doc) // the input's document may be a frame's
	expr := "(() => { if (globalThis.__bap === undefined || globalThis.__bapDoc !== " + jsonString(tg.doc) + ") return " +
		jsonString(agentStale) + "; const e = globalThis.__bap.fileInput(" + fmt.Sprint(tg.idx) + "); return e === null ? \"\" : e; })()"
	res, err := s.e.c.ScriptEvaluate(ctx, bidi.ScriptEvaluateParameters{
		Expression: expr, Target: bidi.ScriptTarget{Context: frame, Sandbox: agentSandbox},
		ResultOwnership: bidi.ScriptResultOwnershipNone,
	})
	if err != nil {
		if frame != s.top && bidi.IsCode(err, bidi.ErrorCodeNoSuchFrame) {
			return fmt.Errorf("%w: the frame is gone", page.ErrStaleNodeHandle)
		}
		return s.mapErr(fmt.Errorf("firefox: page agent: %w", err))
	}
	if res.Type == "exception" || res.Result == nil {
		return errors.New("firefox: page agent: finding the file input failed")
	}
	switch {
	case res.Result.Type == "string" && string(res.Result.Value) == jsonString(agentStale):
		return fmt.Errorf("%w: the browsing context navigated since it was issued", page.ErrStaleNodeHandle)
	case res.Result.Type != "node" || res.Result.SharedID == "":
		return fmt.Errorf("%w: the node is not a file input (or the label of one)", page.ErrInvalidRequest)
	}
	d.mu.Lock()
	b := d.b // the browser the session runs in (after a restart the session is lost: checked above)
	d.mu.Unlock()
	dir, paths, err := b.stageFiles(files)
	if err != nil {
		return err
	}
	m := s.first() // kept until the session (not a popup) closes
	m.mu.Lock()
	m.staged = append(m.staged, dir)
	m.mu.Unlock()
	err = s.e.c.InputSetFiles(ctx, bidi.InputSetFilesParameters{Context: frame,
		Element: bidi.ScriptSharedReference{SharedID: res.Result.SharedID}, Files: paths})
	if err != nil {
		if bidi.IsCode(err, bidi.ErrorCodeNoSuchElement) {
			return fmt.Errorf("%w: the node is no longer in the document", page.ErrStaleNodeHandle)
		}
		if bidi.IsCode(err, bidi.ErrorCodeUnableToSetFileInput) {
			return fmt.Errorf("%w: the file input does not take these files (one file for an input without multiple?)", page.ErrInvalidRequest)
		}
		return s.mapErr(fmt.Errorf("firefox: input.setFiles: %w", err))
	}
	return nil
}

// pointer moves the mouse to the viewport point and, with click, presses and releases its left
// button there.
func (s *Session) pointer(ctx context.Context, x, y float64, click bool) error {
	acts := []map[string]any{{"type": "pointerMove", "x": int64(math.Round(x)), "y": int64(math.Round(y)), "origin": "viewport"}}
	if click {
		acts = append(acts, map[string]any{"type": "pointerDown", "button": 0}, map[string]any{"type": "pointerUp", "button": 0})
	}
	raw, err := json.Marshal(acts)
	if err != nil {
		return err
	}
	return s.perform1(ctx, bidi.InputSourceActions{Type: "pointer", ID: "bap-mouse", Actions: raw,
		Parameters: &bidi.InputPointerParameters{PointerType: bidi.InputPointerTypeMouse}})
}

// typeText types text into the focused element, one key per character, as a keyboard does.
func (s *Session) typeText(ctx context.Context, text string) error {
	var acts []map[string]any
	for _, r := range text {
		k := string(r)
		if r == '\n' {
			k = keyEnter
		}
		acts = append(acts, map[string]any{"type": "keyDown", "value": k}, map[string]any{"type": "keyUp", "value": k})
	}
	return s.keyActions(ctx, acts)
}

// keys presses a parsed key combination: its modifiers down, the key, the modifiers up.
func (s *Session) keys(ctx context.Context, keys []string) error {
	var acts []map[string]any
	for _, k := range keys {
		acts = append(acts, map[string]any{"type": "keyDown", "value": k})
	}
	for i := len(keys) - 1; i >= 0; i-- {
		acts = append(acts, map[string]any{"type": "keyUp", "value": keys[i]})
	}
	return s.keyActions(ctx, acts)
}

func (s *Session) keyActions(ctx context.Context, acts []map[string]any) error {
	raw, err := json.Marshal(acts)
	if err != nil {
		return err
	}
	return s.perform1(ctx, bidi.InputSourceActions{Type: "key", ID: "bap-keyboard", Actions: raw})
}

func (s *Session) perform1(ctx context.Context, src bidi.InputSourceActions) error {
	if err := s.e.c.InputPerformActions(ctx, bidi.InputPerformActionsParameters{Context: inputFrame(ctx, s.top), Actions: []bidi.InputSourceActions{src}}); err != nil {
		return s.mapErr(fmt.Errorf("firefox: input: %w", err))
	}
	return nil
}

// WebDriver's key values (the spec's keyboard table) of the named keys BAP accepts.
const keyEnter = "\uE007"

var namedKeys = map[string]string{
	"enter": keyEnter, "tab": "\uE004", "backspace": "\uE003", "delete": "\uE017", "escape": "\uE00C", "esc": "\uE00C",
	"space": " ", "arrowup": "\uE013", "arrowdown": "\uE015", "arrowleft": "\uE012", "arrowright": "\uE014",
	"home": "\uE011", "end": "\uE010", "pageup": "\uE00E", "pagedown": "\uE00F", "insert": "\uE016",
	"f1": "\uE031", "f2": "\uE032", "f3": "\uE033", "f4": "\uE034", "f5": "\uE035", "f6": "\uE036",
	"f7": "\uE037", "f8": "\uE038", "f9": "\uE039", "f10": "\uE03A", "f11": "\uE03B", "f12": "\uE03C",
}

var modifierKeys = map[string]string{
	"alt": "\uE00A", "control": "\uE009", "ctrl": "\uE009", "meta": "\uE03D", "cmd": "\uE03D", "shift": "\uE008",
}

// parseKey reads "Enter", "a", "Shift+Tab", "Control+a" (the CDP adapter's spelling) into
// WebDriver key values, modifiers first.
func parseKey(s string) ([]string, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: press_key needs a key", page.ErrInvalidRequest)
	}
	parts := strings.Split(s, "+")
	if strings.HasSuffix(s, "++") {
		parts = append(parts[:len(parts)-2], "+")
	}
	var out []string
	shift := false
	for _, m := range parts[:len(parts)-1] {
		k, ok := modifierKeys[strings.ToLower(strings.TrimSpace(m))]
		if !ok {
			return nil, fmt.Errorf("%w: unknown modifier %q (use Alt, Control, Meta, Shift)", page.ErrInvalidRequest, m)
		}
		shift = shift || k == "\uE008"
		out = append(out, k)
	}
	last := parts[len(parts)-1]
	switch {
	case utf8.RuneCountInString(last) > 1:
		k, ok := namedKeys[strings.ToLower(last)]
		if !ok {
			return nil, fmt.Errorf("%w: unknown key %q", page.ErrInvalidRequest, last)
		}
		out = append(out, k)
	case utf8.RuneCountInString(last) == 1:
		if shift {
			last = strings.ToUpper(last)
		}
		out = append(out, last)
	default:
		return nil, fmt.Errorf("%w: unknown key %q", page.ErrInvalidRequest, last)
	}
	return out, nil
}
