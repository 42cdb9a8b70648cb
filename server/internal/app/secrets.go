package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/problem"
)

// Secrets by reference (issue #17, ADR 0017): a tenant's operator stores a value with the origins
// it may be typed into; an agent names it in act fill {secret_ref} and never sees it. The value is
// sealed under the server key for one secret and version; no interface reads it back. The
// service opens it only to hand it to the browser, which types it only into a field of a
// document of one of the secret's origins.

// SecretInfo is everything any interface shows of a secret: never its value.
type SecretInfo struct {
	ID         string     `json:"secret_id"`
	Tenant     string     `json:"tenant"`
	Name       string     `json:"name"`
	Origins    []string   `json:"origins"`
	Note       string     `json:"note,omitempty"`
	Version    int        `json:"version"`
	CreatedAt  time.Time  `json:"created_at"`
	RotatedAt  *time.Time `json:"rotated_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	UseCount   int64      `json:"use_count"`
	Deleted    bool       `json:"deleted,omitempty"`
}

// SecretUse is one line of a secret's audit trail.
type SecretUse struct {
	Tenant, SecretID string
	Action           string // put, rotate, delete, use, refuse
	Actor            string
	Origin           string
	TaskID           string
	CommandID        string
	Reason           string
}

// SecretStore keeps secrets (the store implements it beside Store).
type SecretStore interface {
	// InsertSecret records a new secret and its "put" audit line; a live secret of the same name
	// in the tenant is ErrConflict.
	InsertSecret(ctx context.Context, s *SecretInfo, sealed []byte, actor string) error
	// ReplaceSecretValue stores a new version's value and its "rotate" audit line.
	ReplaceSecretValue(ctx context.Context, tenant, id string, version int, sealed []byte, actor string) error
	// DeleteSecret removes the value (keeping the row) and records "delete".
	DeleteSecret(ctx context.Context, tenant, id, actor string) error
	// GetSecret reads a secret and its sealed value (nil once deleted); ErrNotFound when unknown.
	GetSecret(ctx context.Context, tenant, id string) (*SecretInfo, []byte, error)
	// ListSecrets lists a tenant's live secrets.
	ListSecrets(ctx context.Context, tenant string) ([]SecretInfo, error)
	// RecordSecretUse appends an audit line; a "use" also counts the use.
	RecordSecretUse(ctx context.Context, u SecretUse) error
}

// ErrConflict reports a write that conflicts with what is stored (a name already in use).
var ErrConflict = errors.New("conflict")

// Problem codes of secrets by reference (spec/schemas/ProblemCode.json).
const (
	// CodeSecretOriginMismatch refuses a fill by reference whose target field's document is not on
	// one of the secret's origins (403; nothing was typed). A policy refusal: recorded with a
	// rejected receipt.
	CodeSecretOriginMismatch = problem.SecretOriginMismatch
	// CodeSecretNotFound refuses a secret_ref that names no live secret of the caller's tenant:
	// unknown, another tenant's, or deleted (404; refused before it becomes a command).
	CodeSecretNotFound = problem.SecretNotFound
)

// SecretTx is what the operator's secret commands need of a command transaction: the secret is
// written in the same transaction as its Idempotency-Key's answer.
type SecretTx interface {
	// InsertSecret records a new secret and its "put" audit line; ErrConflict when a live secret
	// of the same name exists in the tenant.
	InsertSecret(ctx context.Context, s *SecretInfo, sealed []byte, actor string) error
	// ReplaceSecretValue stores a new version's value and its "rotate" audit line; ErrNotFound
	// when the secret is not live at version-1.
	ReplaceSecretValue(ctx context.Context, tenant, id string, version int, sealed []byte, actor string) error
	// DeleteSecret removes the value (keeping the row) and records "delete"; ErrNotFound when
	// the secret is not live.
	DeleteSecret(ctx context.Context, tenant, id, actor string) error
	// GetSecret reads a secret (without its value); ErrNotFound when unknown.
	GetSecret(ctx context.Context, tenant, id string) (*SecretInfo, error)
}

// Limits of a secret.
const (
	maxSecretValue   = 4096
	maxSecretOrigins = 20
	maxSecretNote    = 1000
)

var secretNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// secretRefRE is the shape of a secret reference (spec/schemas/ActRequest.json secret_ref).
var secretRefRE = regexp.MustCompile(`^sec_[A-Za-z0-9_-]{1,64}$`)

// ValidSecretRef tells whether ref has the shape of a secret reference.
func ValidSecretRef(ref string) bool { return secretRefRE.MatchString(ref) }

// SecretInput is what an operator stores.
type SecretInput struct {
	Name    string
	Origins []string
	Note    string
	Value   []byte
}

// secretAAD binds a sealed value to one secret and version: it never opens as another's.
func secretAAD(tenant, id string, version int) []byte {
	return fmt.Appendf(nil, "bap-secret/v1\x00%s\x00%s\x00%d", tenant, id, version)
}

// PutSecret stores a new secret of the actor's tenant. The value is sealed at once; the result
// is its metadata.
func (s *Service) PutSecret(ctx context.Context, actor Actor, in SecretInput) (*SecretInfo, error) {
	info, sealed, err := s.newSecret(actor, in)
	if err != nil {
		return nil, err
	}
	if err := s.store.InsertSecret(ctx, info, sealed, actor.Subject); err != nil {
		return nil, secretConflict(err, actor.Tenant, in.Name)
	}
	return info, nil
}

func secretConflict(err error, tenant, name string) error {
	if errors.Is(err, ErrConflict) {
		return Errorf(CodeInvalidRequest, "tenant %s already has a secret named %s: rotate or delete it", tenant, name)
	}
	return err
}

// newSecret checks what an operator stores and seals its value for a new secret id.
func (s *Service) newSecret(actor Actor, in SecretInput) (*SecretInfo, []byte, error) {
	if !secretNameRE.MatchString(in.Name) {
		return nil, nil, Errorf(CodeInvalidRequest, "a secret's name is 1–128 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	if len(in.Note) > maxSecretNote || !utf8.ValidString(in.Note) {
		return nil, nil, Errorf(CodeInvalidRequest, "the note is at most %d bytes of UTF-8", maxSecretNote)
	}
	origins, err := normalizeSecretOrigins(in.Origins)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSecretValue(in.Value); err != nil {
		return nil, nil, err
	}
	info := &SecretInfo{ID: ids.New(ids.Secret), Tenant: actor.Tenant, Name: in.Name, Origins: origins, Note: in.Note,
		Version: 1, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	return info, s.keys.secrets.Seal(in.Value, secretAAD(info.Tenant, info.ID, 1)), nil
}

// SecretResult is what an operator's secret command answers: metadata only (Deleted after
// delete_secret).
type SecretResult struct {
	Secret *SecretInfo
}

// secretCommand runs an operator's secret write as an idempotent command: the write and the
// key's first answer commit together, so a retry with the key replays the answer and writes
// nothing again. It is not a task command (no receipt).
func (s *Service) secretCommand(ctx context.Context, call Call, r Responder[*SecretResult], write func(ctx context.Context, tx SecretTx) (*SecretInfo, error)) (Response, error) {
	return runCommand(ctx, s, call, r, func(ctx context.Context, tx Tx, _ *Command) (*SecretResult, *refusal, error) {
		info, err := write(ctx, tx)
		if err != nil {
			return nil, nil, err
		}
		return &SecretResult{Secret: info}, nil, nil
	})
}

// CreateSecret is create_secret: PutSecret as an idempotent command of the operator's API.
func (s *Service) CreateSecret(ctx context.Context, call Call, in SecretInput, r Responder[*SecretResult]) (Response, error) {
	info, sealed, err := s.newSecret(call.Actor, in)
	if err != nil {
		return Response{}, err
	}
	return s.secretCommand(ctx, call, r, func(ctx context.Context, tx SecretTx) (*SecretInfo, error) {
		if err := tx.InsertSecret(ctx, info, sealed, call.Actor.Subject); err != nil {
			return nil, secretConflict(err, call.Actor.Tenant, in.Name)
		}
		return info, nil
	})
}

// RotateSecretCommand is rotate_secret: RotateSecret as an idempotent command.
func (s *Service) RotateSecretCommand(ctx context.Context, call Call, id string, value []byte, r Responder[*SecretResult]) (Response, error) {
	if err := checkSecretValue(value); err != nil {
		return Response{}, err
	}
	return s.secretCommand(ctx, call, r, func(ctx context.Context, tx SecretTx) (*SecretInfo, error) {
		info, err := liveSecretIn(ctx, tx, call.Actor.Tenant, id)
		if err != nil {
			return nil, err
		}
		v := info.Version + 1
		if err := tx.ReplaceSecretValue(ctx, call.Actor.Tenant, id, v, s.keys.secrets.Seal(value, secretAAD(call.Actor.Tenant, id, v)), call.Actor.Subject); err != nil {
			return nil, err
		}
		return tx.GetSecret(ctx, call.Actor.Tenant, id)
	})
}

// DeleteSecretCommand is delete_secret: DeleteSecret as an idempotent command.
func (s *Service) DeleteSecretCommand(ctx context.Context, call Call, id string, r Responder[*SecretResult]) (Response, error) {
	return s.secretCommand(ctx, call, r, func(ctx context.Context, tx SecretTx) (*SecretInfo, error) {
		if _, err := liveSecretIn(ctx, tx, call.Actor.Tenant, id); err != nil {
			return nil, err
		}
		if err := tx.DeleteSecret(ctx, call.Actor.Tenant, id, call.Actor.Subject); err != nil {
			return nil, err
		}
		return tx.GetSecret(ctx, call.Actor.Tenant, id)
	})
}

func liveSecretIn(ctx context.Context, tx SecretTx, tenant, id string) (*SecretInfo, error) {
	info, err := tx.GetSecret(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) || (err == nil && info.Deleted) {
		return nil, &Error{Code: CodeNotFound, Detail: "no such secret"}
	}
	return info, err
}

// TaskSecrets lists the secrets an agent may name on a task: the tenant's live secrets with at
// least one origin the task's policy allows. The caller sees references, names and origins only.
func (s *Service) TaskSecrets(ctx context.Context, actor Actor, taskID string) ([]SecretInfo, error) {
	t, err := s.store.GetTask(ctx, actor.Tenant, taskID)
	if err != nil {
		return nil, err
	}
	return s.secretsForTask(ctx, t)
}

func (s *Service) secretsForTask(ctx context.Context, t *Task) ([]SecretInfo, error) {
	pol, err := taskPolicy(t)
	if err != nil {
		return nil, err
	}
	all, err := s.store.ListSecrets(ctx, t.Tenant)
	if err != nil {
		return nil, err
	}
	out := []SecretInfo{}
	for _, sec := range all {
		if slices.ContainsFunc(sec.Origins, pol.AllowsOrigin) {
			out = append(out, sec)
		}
	}
	return out, nil
}

// RotateSecret replaces a secret's value (a new version; references stay valid).
func (s *Service) RotateSecret(ctx context.Context, actor Actor, id string, value []byte) (*SecretInfo, error) {
	if err := checkSecretValue(value); err != nil {
		return nil, err
	}
	info, err := s.liveSecret(ctx, actor.Tenant, id)
	if err != nil {
		return nil, err
	}
	v := info.Version + 1
	if err := s.store.ReplaceSecretValue(ctx, actor.Tenant, id, v, s.keys.secrets.Seal(value, secretAAD(actor.Tenant, id, v)), actor.Subject); err != nil {
		return nil, err
	}
	info, _, err = s.store.GetSecret(ctx, actor.Tenant, id)
	return info, err
}

// DeleteSecret deletes a secret's value; every later reference to it is refused.
func (s *Service) DeleteSecret(ctx context.Context, actor Actor, id string) error {
	if _, err := s.liveSecret(ctx, actor.Tenant, id); err != nil {
		return err
	}
	return s.store.DeleteSecret(ctx, actor.Tenant, id, actor.Subject)
}

// ListSecrets lists the metadata of the actor's tenant's live secrets; with origins, only those
// usable on at least one of them.
func (s *Service) ListSecrets(ctx context.Context, actor Actor, origins []string) ([]SecretInfo, error) {
	all, err := s.store.ListSecrets(ctx, actor.Tenant)
	if err != nil || len(origins) == 0 {
		return all, err
	}
	var out []SecretInfo
	for _, sec := range all {
		if slices.ContainsFunc(sec.Origins, func(o string) bool { return slices.Contains(origins, o) }) {
			out = append(out, sec)
		}
	}
	return out, nil
}

func (s *Service) liveSecret(ctx context.Context, tenant, id string) (*SecretInfo, error) {
	info, _, err := s.store.GetSecret(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return nil, &Error{Code: CodeNotFound, Detail: "no such secret"}
	}
	if err != nil {
		return nil, err
	}
	if info.Deleted {
		return nil, &Error{Code: CodeNotFound, Detail: "the secret was deleted"}
	}
	return info, nil
}

// resolveSecretFill puts the value of the secret req names into req for the browser, with the
// secret's origins: the value lives in this request's memory only, and the browser types it only
// into a field of one of those origins. It returns the secret's name ("" without a reference). A
// reference outside a fill, beside a value, unknown or deleted is refused before anything runs.
func (s *Service) resolveSecretFill(ctx context.Context, actor Actor, req *page.ActRequest) (string, error) {
	if req.SecretRef == "" {
		return "", nil
	}
	if req.Action != "fill" {
		return "", Errorf(CodeInvalidRequest, "secret_ref is for fill only")
	}
	if req.Value != "" {
		return "", Errorf(CodeInvalidRequest, "give value or secret_ref, not both")
	}
	info, sealed, err := s.store.GetSecret(ctx, actor.Tenant, req.SecretRef)
	if errors.Is(err, ErrNotFound) {
		return "", &Error{Code: CodeSecretNotFound, Detail: "secret_ref names no secret of this tenant"}
	}
	if err != nil {
		return "", err
	}
	if info.Deleted || sealed == nil {
		_ = s.store.RecordSecretUse(ctx, SecretUse{Tenant: actor.Tenant, SecretID: info.ID, Action: "refuse", Actor: actor.Subject, Reason: "deleted"})
		return "", &Error{Code: CodeSecretNotFound, Detail: "the secret secret_ref names was deleted; an operator stores a new one"}
	}
	value, err := s.keys.secrets.Open(sealed, secretAAD(info.Tenant, info.ID, info.Version))
	if err != nil {
		return "", fmt.Errorf("secret %s does not open under the server key: %w", info.ID, err)
	}
	req.Value = string(value)
	req.SecretOrigins = info.Origins
	return info.Name, nil
}

// recordSecretUse appends the audit line of a secret fill that ran (or was refused).
func (s *Service) recordSecretUse(ctx context.Context, actor Actor, req page.ActRequest, action, origin, taskID, commandID, reason string) {
	if req.SecretRef == "" {
		return
	}
	if err := s.store.RecordSecretUse(ctx, SecretUse{Tenant: actor.Tenant, SecretID: req.SecretRef, Action: action, Actor: actor.Subject,
		Origin: origin, TaskID: taskID, CommandID: commandID, Reason: reason}); err != nil {
		s.cfg.Logger.Warn("recording a secret's use", "secret_id", req.SecretRef, "err", err)
	}
}

func checkSecretValue(v []byte) error {
	if len(v) == 0 || len(v) > maxSecretValue || !utf8.Valid(v) {
		return Errorf(CodeInvalidRequest, "a secret's value is 1–%d bytes of UTF-8 text", maxSecretValue)
	}
	return nil
}

// normalizeSecretOrigins reads the origins a secret may be typed into: http(s) scheme, host and
// port (default ports dropped), lower case, as a browser reports a document's origin.
func normalizeSecretOrigins(in []string) ([]string, error) {
	if len(in) == 0 || len(in) > maxSecretOrigins {
		return nil, Errorf(CodeInvalidRequest, "a secret needs 1–%d origins (https://host[:port])", maxSecretOrigins)
	}
	var out []string
	for _, raw := range in {
		o, err := NormalizeOrigin(raw)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out, nil
}

// NormalizeOrigin reads one origin: scheme://host[:port] of http or https, nothing else.
func NormalizeOrigin(raw string) (string, error) {
	bad := Errorf(CodeInvalidRequest, "origin %q is not http(s)://host[:port]", raw)
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", bad
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if host == "" || strings.ContainsAny(host, "*%") {
		return "", bad
	}
	for _, r := range host {
		if r > 0x7f {
			return "", Errorf(CodeInvalidRequest, "origin %q: write the host in its ASCII (punycode) form", raw)
		}
	}
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	if ip := net.ParseIP(host); ip != nil && strings.Contains(host, ":") {
		host = "[" + ip.String() + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return u.Scheme + "://" + host, nil
}
