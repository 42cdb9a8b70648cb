package api

import (
	"errors"
	"net/http"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
)

// Secrets by reference (issue #17, ADR 0017): the operator's API (bap:secrets.write, never an
// agent's) and an agent's listing of the secrets usable on its task (bap:secrets.read). No answer
// carries a value: the value arrives in create_secret and rotate_secret and goes, sealed, to the
// store only.

func toSecret(s *app.SecretInfo) apigen.Secret {
	out := apigen.Secret{SecretId: s.ID, Name: s.Name, Origins: s.Origins, Version: s.Version, CreatedAt: s.CreatedAt,
		RotatedAt: s.RotatedAt, LastUsedAt: s.LastUsedAt, UseCount: int(s.UseCount)}
	if out.Origins == nil {
		out.Origins = []string{}
	}
	if s.Note != "" {
		out.Note = ptr(s.Note)
	}
	return out
}

func secretResponder(status int, deleted bool) responder[*app.SecretResult] {
	return responder[*app.SecretResult]{status: status, render: func(res *app.SecretResult) (any, error) {
		if res.Secret == nil {
			return nil, errors.New("a secret command answered no secret")
		}
		if deleted {
			return apigen.DeleteSecretResponse{SecretId: res.Secret.ID, Deleted: true}, nil
		}
		if status == http.StatusCreated {
			return apigen.CreateSecretResponse{Secret: toSecret(res.Secret)}, nil
		}
		return apigen.RotateSecretResponse{Secret: toSecret(res.Secret)}, nil
	}}
}

// CreateSecret implements apigen.ServerInterface.
func (s *server) CreateSecret(w http.ResponseWriter, r *http.Request, _ apigen.CreateSecretParams) {
	req, ok := s.begin(w, r)
	if !ok {
		return
	}
	var body apigen.CreateSecretRequest
	if !s.decodeBody(w, req, &body) {
		return
	}
	resp, err := s.svc.CreateSecret(r.Context(), req.call, app.SecretInput{Name: body.Name, Origins: body.Origins,
		Note: deref(body.Note), Value: []byte(deref(body.Value))}, secretResponder(http.StatusCreated, false))
	s.reply(w, r, resp, err)
}

// ListSecrets implements apigen.ServerInterface.
func (s *server) ListSecrets(w http.ResponseWriter, r *http.Request) {
	req, ok := s.begin(w, r)
	if !ok {
		return
	}
	list, err := s.svc.ListSecrets(r.Context(), req.principal.Actor, nil)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apigen.ListSecretsResponse{Secrets: make([]apigen.Secret, 0, len(list))}
	for i := range list {
		out.Secrets = append(out.Secrets, toSecret(&list[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// RotateSecret implements apigen.ServerInterface.
func (s *server) RotateSecret(w http.ResponseWriter, r *http.Request, id apigen.SecretId, _ apigen.RotateSecretParams) {
	req, ok := s.begin(w, r, id)
	if !ok {
		return
	}
	var body apigen.RotateSecretRequest
	if !s.decodeBody(w, req, &body) {
		return
	}
	resp, err := s.svc.RotateSecretCommand(r.Context(), req.call, id, []byte(deref(body.Value)), secretResponder(http.StatusOK, false))
	s.reply(w, r, resp, err)
}

// DeleteSecret implements apigen.ServerInterface.
func (s *server) DeleteSecret(w http.ResponseWriter, r *http.Request, id apigen.SecretId, _ apigen.DeleteSecretParams) {
	req, ok := s.begin(w, r, id)
	if !ok {
		return
	}
	resp, err := s.svc.DeleteSecretCommand(r.Context(), req.call, id, secretResponder(http.StatusOK, true))
	s.reply(w, r, resp, err)
}

// ListTaskSecrets implements apigen.ServerInterface.
func (s *server) ListTaskSecrets(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId) {
	req, ok := s.begin(w, r, taskID)
	if !ok {
		return
	}
	list, err := s.svc.TaskSecrets(r.Context(), req.principal.Actor, taskID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apigen.ListTaskSecretsResponse{Secrets: make([]apigen.TaskSecret, 0, len(list))}
	for _, sec := range list {
		out.Secrets = append(out.Secrets, apigen.TaskSecret{SecretId: sec.ID, Name: sec.Name, Origins: sec.Origins})
	}
	writeJSON(w, http.StatusOK, out)
}
