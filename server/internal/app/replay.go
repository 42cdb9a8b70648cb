package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/originweave/bap/server/internal/page"
)

// Verified replay (issue #20 item 4, ADR 0035). replay_task turns the record.step events of a
// finished recording task into the plan of a new delegated task (replay_of), run by the workers
// like any other plan. Every session of that task answers its requests from the recorded task's
// archive (ServeFrom) and never reaches the network; its steps leave record.step events of their
// own, and after each one the worker compares it with the recorded step
// (replay.step_compared), stopping at the first divergence; replay.finished gives the verdict.
// No model is called. Approval rules are not carried over: nothing a replay sends leaves the
// node, so there is nothing to approve.

// Replay modes (replay_task's mode).
const (
	// ReplayArchive answers every request of the replay from the task's archive: nothing
	// reaches the network.
	ReplayArchive = "archive"
	// ReplayLiveDryRun runs the recorded path against the real sites, sending only plain-HTTP
	// requests with a safe method, and stops before the first recorded step that sent a side
	// effect (an act whose effect was not any_action).
	ReplayLiveDryRun = "live_dry_run"
)

// replayNotPossible is the refusal of a replay, saying why.
func replayNotPossible(format string, args ...any) *Error {
	return Errorf(CodeReplayNotPossible, format, args...)
}

// ReplayTask creates a replay of a finished recording task of the caller's tenant: a new
// delegated task (replay_of) whose plan repeats the task's recorded steps, against its archive
// (ReplayArchive) or, up to its first side effect, against the real sites (ReplayLiveDryRun).
func (s *Service) ReplayTask(ctx context.Context, call Call, taskID, mode string, r Responder[*TaskResult]) (Response, error) {
	if resp, ok, err := s.replayFirst(ctx, call); ok || err != nil {
		return resp, err
	}
	if mode != ReplayArchive && mode != ReplayLiveDryRun {
		return Response{}, Errorf(CodeInvalidRequest, "mode must be %s or %s", ReplayArchive, ReplayLiveDryRun)
	}
	orig, err := s.store.GetTask(ctx, call.Actor.Tenant, taskID) // another tenant's task is not found
	if err != nil {
		return Response{}, err
	}
	if !orig.State.Terminal() {
		return Response{}, replayNotPossible("the task is %s; only a finished task can be replayed", orig.State)
	}
	steps, err := s.recordedSteps(ctx, orig.Tenant, orig.ID)
	if err != nil {
		return Response{}, err
	}
	if len(steps) == 0 {
		return Response{}, replayNotPossible("the task recorded no steps to replay (only a task with policy.record leaves them)")
	}
	if mode == ReplayLiveDryRun {
		steps = beforeSideEffect(steps)
		if len(steps) == 0 {
			return Response{}, replayNotPossible("the task's first step sent a side effect: a dry run has nothing to check before it")
		}
	}
	// A replay types the recorded plain values again, in a page its caller observes: they are kept
	// sealed for the principal that typed them (ADR 0038), never shown to another of the tenant.
	if call.Actor.Subject != orig.CreatedBy {
		for i, st := range steps {
			if st.Operation == "act" && st.Fill == "plain" {
				return Response{}, replayNotPossible("step %d typed a plain value, which only the principal that created the task may have typed again", i)
			}
		}
	}
	fills, err := s.recordedFills(ctx, orig)
	if err != nil {
		return Response{}, err
	}
	plan, err := replayPlan(steps, fills) // the fills' values are sealed with the plan (CreateTask)
	if err != nil {
		return Response{}, err
	}
	if mode == ReplayArchive {
		if _, err := s.replayArchive(ctx, orig); err != nil {
			return Response{}, err
		}
	}
	return s.CreateTask(ctx, call, CreateTaskInput{
		Goal:          "Replay of " + orig.ID,
		Policy:        PolicySpec{AllowedOrigins: orig.Policy.AllowedOrigins},
		Postcondition: orig.Postcondition,
		Plan:          plan,
		ReplayOf:      orig.ID,
		ReplayMode:    mode,
	}, r)
}

// beforeSideEffect is steps up to (not including) the first act that sent a side effect: one
// whose recorded effect is not any_action (a form submission, an upload, or not recorded: fail
// closed).
func beforeSideEffect(steps []recordedStep) []recordedStep {
	for i, st := range steps {
		if st.Operation == "act" && st.Effect != page.EffectAnyAction {
			return steps[:i]
		}
	}
	return steps
}

// recordedStep is a record.step event's data.
type recordedStep struct {
	CommandID         string      `json:"command_id"`
	Operation         string      `json:"operation"`
	URL               string      `json:"url"`
	Action            string      `json:"action"`
	Effect            string      `json:"effect"`
	Target            *StepTarget `json:"target"`
	Fill              string      `json:"fill"`
	SecretRef         string      `json:"secret_ref"`
	Option            string      `json:"option"`
	Values            []string    `json:"values"`
	Key               string      `json:"key"`
	PageURL           string      `json:"page_url"`
	EpochChanged      *bool       `json:"epoch_changed"`
	ObservationDigest string      `json:"observation_digest"`
}

// recordedSteps reads a task's record.step events, in order.
func (s *Service) recordedSteps(ctx context.Context, tenant, taskID string) ([]recordedStep, error) {
	var out []recordedStep
	after := int64(0)
	for {
		evs, err := s.store.ListEvents(ctx, tenant, taskID, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if e.Type != "record.step" {
				continue
			}
			raw := e.DataJSON
			if len(raw) == 0 {
				var err error
				if raw, err = json.Marshal(e.Data); err != nil {
					return nil, err
				}
			}
			var st recordedStep
			if err := json.Unmarshal(raw, &st); err != nil {
				return nil, fmt.Errorf("reading record.step %d of %s: %w", e.Seq, taskID, err)
			}
			out = append(out, st)
		}
		if len(evs) < 1000 {
			return out, nil
		}
		after = evs[len(evs)-1].Seq
	}
}

// replayPlan is the plan that repeats steps: each step once (a replay that fails a step has
// diverged; it is not retried), an act aimed at its target by exact role and name, a plain fill
// typing what it typed (fills: by fill command).
func replayPlan(steps []recordedStep, fills map[string]string) ([]PlanStep, error) {
	plan := make([]PlanStep, 0, len(steps))
	for i, st := range steps {
		var args map[string]any
		switch st.Operation {
		case "navigate":
			args = map[string]any{"url": st.URL}
		case "act":
			_, kept := fills[st.CommandID]
			switch {
			case st.Fill == "plain" && !kept:
				return nil, replayNotPossible("step %d filled a plain value that was not kept (the task was recorded before values were kept for replay)", i)
			case st.Action == "upload_file":
				return nil, replayNotPossible("step %d uploaded a file; a replay does not upload files", i)
			}
			args = map[string]any{"action": st.Action}
			if st.Target != nil {
				args["query"] = map[string]any{"role": st.Target.Role, "name": st.Target.Name, "exact": true}
			} else if st.Action != "press_key" {
				return nil, replayNotPossible("step %d's target was not recorded", i)
			}
			if st.SecretRef != "" {
				args["secret_ref"] = st.SecretRef
			}
			if st.Fill == "plain" {
				args["value"] = fills[st.CommandID]
			}
			if st.Option != "" {
				args["value"] = st.Option
			}
			if len(st.Values) > 0 {
				args["values"] = st.Values
			}
			if st.Key != "" {
				args["key"] = st.Key
			}
		default:
			return nil, replayNotPossible("step %d is a %q, which a replay cannot repeat", i, st.Operation)
		}
		raw, err := json.Marshal(args)
		if err != nil {
			return nil, err
		}
		plan = append(plan, PlanStep{Op: st.Operation, Args: raw, MaxAttempts: 1})
	}
	return plan, nil
}

// replayArchive opens the archive of t (a recorded task) for a replay's session, with the values
// of the secrets a replay may type masked as they were recorded.
func (s *Service) replayArchive(ctx context.Context, t *Task) (page.Archive, error) {
	if s.cfg.Recording == nil {
		return nil, replayNotPossible("this node keeps no archives (no Recording configured)")
	}
	infos, err := s.secretsForTask(ctx, t)
	if err != nil {
		return nil, err
	}
	fills, err := s.recordedFills(ctx, t)
	if err != nil {
		return nil, err
	}
	protected := map[string]string{}
	for _, v := range fills {
		protected[v] = "protected" // as the recording masked them (protectFill)
	}
	for _, info := range infos {
		_, sealed, err := s.store.GetSecret(ctx, t.Tenant, info.ID)
		if err != nil || sealed == nil {
			continue
		}
		v, err := s.keys.secrets.Open(sealed, secretAAD(info.Tenant, info.ID, info.Version))
		if err != nil {
			return nil, err
		}
		protected[string(v)] = info.Name
	}
	a, err := s.cfg.Recording.ReplayArchive(ctx, t.Tenant, t.ID, protected)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, replayNotPossible("the task's archive is not on this node (archives stay on the node that recorded them)")
	case errors.Is(err, ErrNotReplayable):
		return nil, replayNotPossible("%v", err)
	case err != nil:
		return nil, err
	}
	return a, nil
}

// fillAAD binds a recorded fill's sealed value to its tenant, task and command.
func fillAAD(tenant, taskID, commandID string) []byte {
	return fmt.Appendf(nil, "bap-recorded-fill/v1\x00%s\x00%s\x00%s", tenant, taskID, commandID)
}

// keepFill keeps, sealed, the value a recording task's plain fill typed (command c), so that a
// replay can type it again: in the fill's own transaction, beside its record.step.
func (s *Service) keepFill(ctx context.Context, c *commandCtx, req page.ActRequest) error {
	if req.Action != "fill" || req.SecretRef != "" || req.Value == "" || c.t.ReplayOf != "" {
		return nil
	}
	return c.tx.RecordFillValue(ctx, c.t.Tenant, c.t.ID, c.cmd.ID, s.keys.fills.Seal([]byte(req.Value), fillAAD(c.t.Tenant, c.t.ID, c.cmd.ID)))
}

// recordedFills opens the values t's plain fills typed, by fill command.
func (s *Service) recordedFills(ctx context.Context, t *Task) (map[string]string, error) {
	sealed, err := s.store.RecordedFillValues(ctx, t.Tenant, t.ID)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(sealed))
	for cmd, b := range sealed {
		v, err := s.keys.fills.Open(b, fillAAD(t.Tenant, t.ID, cmd))
		if err != nil {
			return nil, replayNotPossible("a fill value of the task cannot be opened: the server key is not the one that sealed it (ADR 0015)")
		}
		out[cmd] = string(v)
	}
	return out, nil
}

// serveReplay makes a fresh session of a replay task answer from the replayed task's archive
// before anything loads; a session that cannot is closed unused (it must never reach the
// network).
func (s *Service) serveReplay(ctx context.Context, sess BrowserSession, t *Task) error {
	orig, err := s.store.GetTask(ctx, t.Tenant, t.ReplayOf)
	if err == nil {
		var a page.Archive
		if a, err = s.replayArchive(ctx, orig); err == nil {
			err = sess.ServeFrom(a)
		}
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = sess.Close(cctx)
		if AsError(err) != nil {
			return err
		}
		return fmt.Errorf("%w: %w", page.ErrInvalidRequest, err)
	}
	return nil
}

// ReplayStepResult is the comparison of one replayed step with the recorded one.
type ReplayStepResult struct {
	// Diverged is true when the step differed: the replay stops, its verdict recorded.
	Diverged bool
	// Finished is true when the verdict was recorded (a divergence, or the last step).
	Finished bool
}

// CompareReplayStep compares step i of a replay task (claim's), which ran as command commandID,
// with the recorded step and records replay.step_compared, and replay.finished at the first
// divergence or after the last step (where the task's postcondition is compared too: whether it
// holds on the replayed page as it held on the recorded one). actor is the worker's subject.
func (s *Service) CompareReplayStep(ctx context.Context, claim *LeaseClaim, actor string, i int, commandID string) (ReplayStepResult, error) {
	var res ReplayStepResult
	t, err := s.store.GetTask(ctx, claim.Tenant, claim.TaskID)
	if err != nil || t.ReplayOf == "" {
		return res, err
	}
	want, err := s.recordedSteps(ctx, t.Tenant, t.ReplayOf)
	if err != nil {
		return res, err
	}
	got, err := s.recordedSteps(ctx, t.Tenant, t.ID)
	if err != nil {
		return res, err
	}
	// The replay's own record of the step is the one its command left (a safe step rerun after a
	// lost session leaves another, which is not compared).
	var mine *recordedStep
	for k := range got {
		if got[k].CommandID == commandID && commandID != "" {
			mine = &got[k]
		}
	}
	var d *stepDiff
	switch {
	case i >= len(want):
		d = &stepDiff{field: "step_count", expected: strconv.Itoa(len(want)), got: strconv.Itoa(i + 1)}
	case mine == nil:
		d = &stepDiff{field: "refused", expected: want[i].Operation, got: "no step recorded"}
	case t.ReplayMode == ReplayLiveDryRun:
		// A live site's content changes: a dry run checks the path, not the page's content.
		w, g := want[i], *mine
		w.ObservationDigest, g.ObservationDigest = "", ""
		d = compareSteps(w, g)
	default:
		d = compareSteps(want[i], *mine)
	}
	if d == nil && i+1 >= len(want) {
		d = s.comparePostcondition(ctx, t)
	}
	return s.replayVerdict(ctx, claim, actor, t, i, len(want), d)
}

// comparePostcondition tells whether the replayed task's postcondition holds on the replay's page
// as it held on the recorded task's at its close (nil: alike, none declared, or the recorded
// task's was never evaluated).
func (s *Service) comparePostcondition(ctx context.Context, t *Task) *stepDiff {
	if len(t.Postcondition) == 0 {
		return nil
	}
	orig, err := s.store.GetTask(ctx, t.Tenant, t.ReplayOf)
	if err != nil {
		return &stepDiff{field: "postcondition", expected: "", got: "the replayed task cannot be read"}
	}
	if orig.Verification != "verified" && orig.Verification != "unmet" {
		return nil // never evaluated (cancelled, expired): nothing recorded to compare with
	}
	clauses, err := postconditionClauses(t.Postcondition)
	if err != nil {
		return nil
	}
	holds, _ := s.evaluatePostcondition(ctx, t.ID, clauses)
	got := "met"
	for _, h := range holds {
		if !h {
			got = "unmet"
		}
	}
	want := "unmet"
	if orig.Verification == "verified" {
		want = "met"
	}
	if got != want {
		return &stepDiff{field: "postcondition", expected: want, got: got}
	}
	return nil
}

// ReplayStepFailed records that step i of a replay task failed (code): a divergence.
func (s *Service) ReplayStepFailed(ctx context.Context, claim *LeaseClaim, actor string, i int, code Code) error {
	t, err := s.store.GetTask(ctx, claim.Tenant, claim.TaskID)
	if err != nil || t.ReplayOf == "" {
		return err
	}
	want, err := s.recordedSteps(ctx, t.Tenant, t.ReplayOf)
	if err != nil {
		return err
	}
	expected := ""
	if i < len(want) {
		expected = want[i].Operation
	}
	_, err = s.replayVerdict(ctx, claim, actor, t, i, len(want), &stepDiff{field: "refused", expected: expected, got: string(code)})
	return err
}

// replayVerdict records step i's comparison (d nil: identical) and, when the replay ends here,
// its verdict.
func (s *Service) replayVerdict(ctx context.Context, claim *LeaseClaim, actor string, t *Task, i, n int, d *stepDiff) (ReplayStepResult, error) {
	planned := len(t.Plan) // a dry run's plan stops before the first side effect
	res := ReplayStepResult{Diverged: d != nil, Finished: d != nil || i+1 >= planned}
	var altered []string
	if res.Finished && t.ReplayMode != ReplayLiveDryRun {
		altered = s.alteredRecords(ctx, t)
	}
	err := s.InLease(ctx, claim, actor, func(l *LeaseTx) error {
		cmp := map[string]any{"step": i, "identical": d == nil}
		if d != nil {
			cmp["field"], cmp["expected"], cmp["got"] = d.field, clip(d.expected), clip(d.got)
		}
		if err := l.Emit("replay.step_compared", "replay", cmp); err != nil {
			return err
		}
		if !res.Finished {
			return nil
		}
		mode := t.ReplayMode
		if mode == "" {
			mode = ReplayArchive
		}
		fin := map[string]any{"replay_of": t.ReplayOf, "mode": mode, "outcome": "identical", "steps": i + 1}
		if d == nil && planned < n {
			fin["stopped_before"] = planned
		}
		if d != nil {
			fin["outcome"], fin["step"], fin["field"], fin["expected"], fin["got"] = "diverged", i, d.field, clip(d.expected), clip(d.got)
		}
		if len(altered) > 0 {
			fin["altered_records"] = altered
		}
		return l.Emit("replay.finished", "replay", fin)
	})
	return res, err
}

// ReplayVerdict is a replay's verdict: the data of its replay.finished event, which a replay
// task's result repeats (result.replay).
type ReplayVerdict struct {
	ReplayOf string `json:"replay_of"`
	Mode     string `json:"mode,omitempty"`
	// Outcome is "identical" or "diverged"; Step, Field, Expected and Got name a divergence.
	Outcome string `json:"outcome"`
	Steps   int    `json:"steps"`
	// StoppedBefore is the recorded step a live dry run stopped before (its first side effect).
	StoppedBefore *int   `json:"stopped_before,omitempty"`
	Step          *int   `json:"step,omitempty"`
	Field         string `json:"field,omitempty"`
	Expected      string `json:"expected,omitempty"`
	Got           string `json:"got,omitempty"`
	// AlteredRecords are the archived exchanges (target URIs) changed after they were recorded.
	AlteredRecords []string `json:"altered_records,omitempty"`
}

// replayVerdictOf reads a replay task's verdict from its history (nil when it has none: the
// replay ended before comparing, its browser lost and not restored).
func (s *Service) replayVerdictOf(ctx context.Context, t *Task) (*ReplayVerdict, error) {
	raw, err := s.store.LastEventData(ctx, t.Tenant, t.ID, "replay.finished")
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var v ReplayVerdict
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("reading the replay verdict of %s: %w", t.ID, err)
	}
	return &v, nil
}

// maxAlteredRecords bounds replay.finished's altered_records.
const maxAlteredRecords = 100

// alteredRecords lists the exchanges of the replayed task's archive that were changed after they
// were recorded (nil when none was, or the archive cannot be read again: the verdict stands).
func (s *Service) alteredRecords(ctx context.Context, t *Task) []string {
	orig, err := s.store.GetTask(ctx, t.Tenant, t.ReplayOf)
	if err != nil {
		return nil
	}
	a, err := s.replayArchive(ctx, orig)
	if err != nil {
		return nil
	}
	out := a.Altered()
	if len(out) > maxAlteredRecords {
		out = out[:maxAlteredRecords]
	}
	for i := range out {
		out[i] = clipRunes(out[i], 2048)
	}
	return out
}

// stepDiff is the first field in which a replayed step differs from the recorded one.
type stepDiff struct{ field, expected, got string }

// compareSteps compares a replayed step with the recorded one, field by field in the order a
// step happens: what it did, on what, where it led, what the page showed.
func compareSteps(want, got recordedStep) *stepDiff {
	if want.Operation != got.Operation || want.Action != got.Action {
		return &stepDiff{"operation", want.Operation + " " + want.Action, got.Operation + " " + got.Action}
	}
	if w, g := targetText(want.Target), targetText(got.Target); w != g {
		return &stepDiff{"target", w, g}
	}
	if want.PageURL != got.PageURL {
		return &stepDiff{"url", want.PageURL, got.PageURL}
	}
	if w, g := boolText(want.EpochChanged), boolText(got.EpochChanged); w != g {
		return &stepDiff{"epoch", w, g}
	}
	if want.ObservationDigest != got.ObservationDigest {
		return &stepDiff{"observation", want.ObservationDigest, got.ObservationDigest}
	}
	return nil
}

func targetText(t *StepTarget) string {
	if t == nil {
		return ""
	}
	return fmt.Sprintf("role=%q name=%q frame=%q", t.Role, t.Name, t.Frame)
}

func boolText(b *bool) string {
	if b == nil {
		return ""
	}
	return strconv.FormatBool(*b)
}

// clip bounds a compared value as the events' schema does.
func clip(s string) string {
	if len(s) > 8192 {
		return s[:8192]
	}
	return s
}
