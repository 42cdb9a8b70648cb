package orchestratortest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// Script is the JSON form of a fake's configuration and answers (the --script file of
// cmd/fakeorch):
//
//	{
//	  "models": [{"id": "m-large", "provider": "acme", "region": "eu", "retention_days": 0,
//	              "max_classification": "restricted", "input_price_per_m": 3, "output_price_per_m": 15}],
//	  "answers": {
//	    "m-large": [{"status": 500}, {"content": {"action": "done"}, "delay": "1s"}],
//	    "*":       [{"content": "not JSON at all"}]
//	  },
//	  "repeat_last": true
//	}
//
// An answer's content is any JSON value (sent as its JSON text) or a string (sent verbatim); the
// other fields are those of Answer in snake case, delay as a Go duration ("1.5s").
type Script struct {
	Models     []Model                   `json:"models"`
	Answers    map[string][]ScriptAnswer `json:"answers"`
	RepeatLast bool                      `json:"repeat_last"`
}

// ScriptAnswer is one answer of a Script.
type ScriptAnswer struct {
	Content          json.RawMessage `json:"content,omitempty"`
	Status           int             `json:"status,omitempty"`
	ErrorCode        string          `json:"error_code,omitempty"`
	Delay            string          `json:"delay,omitempty"`
	Hang             bool            `json:"hang,omitempty"`
	PromptTokens     int             `json:"prompt_tokens,omitempty"`
	CompletionTokens int             `json:"completion_tokens,omitempty"`
	FinishReason     string          `json:"finish_reason,omitempty"`
	Refusal          string          `json:"refusal,omitempty"`
}

// Answer converts a to the Go form.
func (a ScriptAnswer) Answer() (Answer, error) {
	out := Answer{Status: a.Status, ErrorCode: a.ErrorCode, Hang: a.Hang, PromptTokens: a.PromptTokens,
		CompletionTokens: a.CompletionTokens, FinishReason: a.FinishReason, Refusal: a.Refusal}
	if a.Delay != "" {
		d, err := time.ParseDuration(a.Delay)
		if err != nil || d < 0 {
			return Answer{}, fmt.Errorf("delay %q: want a duration such as 1.5s", a.Delay)
		}
		out.Delay = d
	}
	if c := bytes.TrimSpace(a.Content); len(c) > 0 {
		var s string
		if json.Unmarshal(c, &s) == nil {
			out.Content = s
		} else {
			var buf bytes.Buffer
			if err := json.Compact(&buf, c); err != nil {
				return Answer{}, err
			}
			out.Content = buf.String()
		}
	}
	return out, nil
}

// LoadScript reads a Script file.
func LoadScript(path string) (Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Script{}, err
	}
	var sc Script
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sc); err != nil {
		return Script{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(sc.Models) == 0 {
		return Script{}, fmt.Errorf("%s: %w", path, errors.New("no models"))
	}
	return sc, nil
}

// Apply configures s with the script's models and queues its answers.
func (sc Script) Apply(s *Server) error {
	queues := map[string][]Answer{}
	for model, list := range sc.Answers {
		for i, sa := range list {
			a, err := sa.Answer()
			if err != nil {
				return fmt.Errorf("answers.%s[%d]: %w", model, i, err)
			}
			queues[model] = append(queues[model], a)
		}
	}
	s.SetModels(sc.Models...)
	s.mu.Lock()
	s.repeatLast = sc.RepeatLast
	s.mu.Unlock()
	for model, q := range queues {
		s.Script(model, q...)
	}
	return nil
}
