package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash"
	"sync"

	"github.com/originweave/bap/server/internal/idempotency"
	"github.com/originweave/bap/server/internal/serverkey"
)

// The server key (ADR 0015) keys what the use-cases keep of request bodies that may hold
// protected values, each purpose under a key of its own: the fingerprints of idempotent requests,
// the digests of held actions, and the sealed fill values of delegated plans. The database then
// holds nothing a copy of it could reverse or open.

// keyring is what the server key derives for the Service.
type keyring struct {
	fingerprints *idempotency.Fingerprinter
	actionKey    *serverkey.Key
	plan         *serverkey.Sealer
	checkpoint   *serverkey.Sealer // checkpoint state artifacts (ADR 0017)
	secrets      *serverkey.Sealer // the values of tenants' secrets (secrets.go)
	chain        []byte            // keys the history chain's digests (audit.go)
	chains       *sync.Pool        // of *historychain.Chain under chain: an HMAC is costly to set up
	auditSeal    *serverkey.Sealer // the audit signing keys (audit.go)
	observation  []byte            // keys the observation digests of record.step (replaystep.go)
	fills        *serverkey.Sealer // what a recording task's plain fills typed (replay.go)
}

func newKeyring(k *serverkey.Key) keyring {
	if k == nil {
		k = serverkey.Ephemeral()
	}
	fp, err := idempotency.NewFingerprinter(k.Derive(serverkey.PurposeIdempotency))
	if err != nil {
		panic("app: a derived key is 32 bytes: " + err.Error())
	}
	return keyring{fingerprints: fp, actionKey: k, plan: k.Sealer(serverkey.PurposePlanValues),
		checkpoint: k.Sealer(serverkey.PurposeCheckpointState), secrets: k.Sealer(serverkey.PurposeSecretValues),
		chain: k.Derive(serverkey.PurposeHistoryChain), auditSeal: auditSealer(k),
		observation: k.Derive(serverkey.PurposeObservationDigest), fills: k.Sealer(serverkey.PurposeRecordedFillValues),
		chains: &sync.Pool{}}
}

// Fingerprints reduces requests to their keyed fingerprints: a transport fills Call.Fingerprint
// with it.
func (s *Service) Fingerprints() *idempotency.Fingerprinter { return s.keys.fingerprints }

// actionMAC is a new HMAC of held actions (approval_request.action_digest).
func (k keyring) actionMAC() hash.Hash { return k.actionKey.MAC(serverkey.PurposeActionDigest) }

// protectedFields are the arguments of a plan step kind that hold protected values: sealed in
// the database, masked everywhere else, opened only when the step runs (masking.go masks the
// same fields).
func protectedFields(op string) []string {
	if op == "act" {
		return []string{"value"}
	}
	return nil
}

// stepAAD binds a step's sealed values to that step alone: a value sealed for one step never
// opens as another's, of another task or tenant.
func stepAAD(tenant, taskID string, index int, op string) []byte {
	return fmt.Appendf(nil, "bap-plan-step/v1\x00%s\x00%s\x00%d\x00%s", tenant, taskID, index, op)
}

// sealPlan returns plan with each step's protected values sealed (PlanStep.Sealed) and masked in
// its arguments.
func (k keyring) sealPlan(tenant, taskID string, plan []PlanStep) ([]PlanStep, error) {
	if len(plan) == 0 {
		return plan, nil
	}
	out := make([]PlanStep, len(plan))
	for i, st := range plan {
		sealed, err := k.sealStep(tenant, taskID, i, st)
		if err != nil {
			return nil, err
		}
		out[i] = sealed
	}
	return out, nil
}

// sealStep seals the protected values of step index (a step without any is returned as it is).
func (k keyring) sealStep(tenant, taskID string, index int, st PlanStep) (PlanStep, error) {
	fields := protectedFields(st.Op)
	if len(fields) == 0 || len(st.Sealed) > 0 || len(bytes.TrimSpace(st.Args)) == 0 {
		return st, nil
	}
	args, err := decodeObject(st.Args)
	if err != nil {
		return st, Errorf(CodeInvalidRequest, "the arguments of step %d cannot be read", index)
	}
	secret := map[string]json.RawMessage{}
	for _, f := range fields {
		if v, ok := args[f]; ok {
			secret[f] = v
			args[f] = json.RawMessage(`"` + MaskedValue + `"`)
		}
	}
	if len(secret) == 0 {
		return st, nil
	}
	plain, err := json.Marshal(secret)
	if err != nil {
		return st, err
	}
	maskedArgs, err := json.Marshal(args)
	if err != nil {
		return st, err
	}
	st.Args, st.Sealed = maskedArgs, k.plan.Seal(plain, stepAAD(tenant, taskID, index, st.Op))
	return st, nil
}

// openStep returns step index with its sealed values back in its arguments, for running it. A
// step that cannot be opened (its values sealed under another server key) is an error no retry
// cures.
func (k keyring) openStep(tenant, taskID string, index int, st PlanStep) (PlanStep, *Error) {
	if len(st.Sealed) == 0 {
		return st, nil
	}
	plain, err := k.plan.Open(st.Sealed, stepAAD(tenant, taskID, index, st.Op))
	if err != nil {
		return st, Errorf(CodeInvalidRequest, "the protected values of step %d cannot be opened: the server key is not the one that sealed them (ADR 0015)", index)
	}
	var secret map[string]json.RawMessage
	if err := json.Unmarshal(plain, &secret); err != nil {
		return st, Errorf(CodeInvalidRequest, "the protected values of step %d cannot be read", index)
	}
	args, err := decodeObject(st.Args)
	if err != nil {
		return st, Errorf(CodeInvalidRequest, "the arguments of step %d cannot be read", index)
	}
	for f, v := range secret {
		args[f] = v
	}
	opened, err := json.Marshal(args)
	if err != nil {
		return st, Errorf(CodeInvalidRequest, "the arguments of step %d cannot be read", index)
	}
	st.Args, st.Sealed = opened, nil
	return st, nil
}

// decodeObject decodes a JSON object keeping each member's bytes as they are.
func decodeObject(raw json.RawMessage) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	return m, nil
}

// MaskedValue stands for a protected value wherever it is shown (a fill's value in a stored plan,
// a form control's value in what a model sees).
const MaskedValue = "***"
