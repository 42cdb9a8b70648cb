package orchestrator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/originweave/bap/server/internal/app"
)

// FileConfig is the JSON file of --orchestrator-config:
//
//	{
//	  "roles": {"planner": ["m-large", "m-small"], "observer": ["m-small"],
//	            "verifier": ["m-large"], "safety": ["m-small"]},
//	  "default": ["m-small"],
//	  "models": {
//	    "m-large": {"provider": "acme", "region": "eu", "retention_days": 0,
//	                "max_classification": "confidential",
//	                "input_price_per_m": 3, "output_price_per_m": 15}
//	  },
//	  "max_request_bytes": 65536
//	}
//
// roles maps each role to its approved models, in the order they are tried; default (optional)
// serves the roles roles does not name — one model in default is a single-model configuration.
// With neither, every model the orchestrator lists is approved for every role, in the order
// listed. models (optional) gives metadata by model id; it wins over what the orchestrator's
// discovery answer says. Unknown fields are refused, so that a misspelt key cannot silently widen nothing
// into something.
type FileConfig struct {
	Roles   map[string][]string    `json:"roles"`
	Default []string               `json:"default,omitempty"`
	Models  map[string]ModelConfig `json:"models,omitempty"`
	// MaxRequestBytes is the orchestrator's request body limit (0: DefaultMaxRequestBytes, the
	// 64 KiB of contextual-orchestrator); longer prompts are cut with a marker to fit.
	MaxRequestBytes int `json:"max_request_bytes,omitempty"`
}

// ModelConfig is the configured metadata of one model; a nil or empty field leaves the value to the
// discovery answer (and unknown when that is silent too).
type ModelConfig struct {
	Provider          string   `json:"provider,omitempty"`
	Region            string   `json:"region,omitempty"`
	RetentionDays     *int     `json:"retention_days,omitempty"`
	MaxClassification string   `json:"max_classification,omitempty"`
	InputPricePerM    *float64 `json:"input_price_per_m,omitempty"`
	OutputPricePerM   *float64 `json:"output_price_per_m,omitempty"`
}

// Roles lists the roles a configuration may name.
var Roles = []string{app.RoleObserver, app.RolePlanner, app.RoleVerifier, app.RoleSafety}

// LoadConfigFile reads and checks a FileConfig.
func LoadConfigFile(path string) (FileConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return FileConfig{}, fmt.Errorf("orchestrator config: %w", err)
	}
	fc, err := ParseConfig(b)
	if err != nil {
		return FileConfig{}, fmt.Errorf("orchestrator config %s: %w", path, err)
	}
	return fc, nil
}

// ParseConfig decodes and checks a FileConfig.
func ParseConfig(b []byte) (FileConfig, error) {
	var fc FileConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fc); err != nil {
		return FileConfig{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return FileConfig{}, errors.New("trailing data after the JSON object")
	}
	return fc, fc.Check()
}

// Check reports a configuration that must not be used.
func (fc FileConfig) Check() error {
	if len(fc.Roles) == 0 && len(fc.Default) == 0 && len(fc.Models) == 0 {
		return errors.New(`empty configuration: give "roles" (role → ordered model ids), "default" or "models"`)
	}
	if fc.MaxRequestBytes != 0 && fc.MaxRequestBytes < minRequestBytes {
		return fmt.Errorf("max_request_bytes %d: at least %d, please (leave it out for the default %d)", fc.MaxRequestBytes, minRequestBytes, DefaultMaxRequestBytes)
	}
	checkList := func(where string, ids []string) error {
		if len(ids) == 0 {
			return fmt.Errorf("%s: empty model list", where)
		}
		for i, id := range ids {
			if strings.TrimSpace(id) == "" {
				return fmt.Errorf("%s[%d]: empty model id", where, i)
			}
			if slices.Index(ids, id) != i {
				return fmt.Errorf("%s: model %q listed twice", where, id)
			}
		}
		return nil
	}
	for role, ids := range fc.Roles {
		if !slices.Contains(Roles, role) {
			return fmt.Errorf("roles: unknown role %q (roles are %s)", role, strings.Join(Roles, ", "))
		}
		if err := checkList("roles."+role, ids); err != nil {
			return err
		}
	}
	if len(fc.Default) > 0 {
		if err := checkList("default", fc.Default); err != nil {
			return err
		}
	}
	for id, m := range fc.Models {
		if m.RetentionDays != nil && *m.RetentionDays < 0 {
			return fmt.Errorf("models.%s.retention_days: must not be negative (leave it out when unknown)", id)
		}
		if m.MaxClassification != "" && classRank(m.MaxClassification) < 0 {
			return fmt.Errorf("models.%s.max_classification %q: must be one of %s", id, m.MaxClassification, strings.Join(app.DataClassifications, ", "))
		}
		if (m.InputPricePerM != nil && *m.InputPricePerM < 0) || (m.OutputPricePerM != nil && *m.OutputPricePerM < 0) {
			return fmt.Errorf("models.%s: prices must not be negative", id)
		}
	}
	return nil
}

// ApprovesAllListed reports whether the configuration names no roles and no default, so that
// every model the orchestrator lists is approved for every role.
func (fc FileConfig) ApprovesAllListed() bool { return len(fc.Roles) == 0 && len(fc.Default) == 0 }

// approved lists the approved models of role in order (the default list for a role the
// configuration does not name).
func (fc FileConfig) approved(role string) []string {
	if ids, ok := fc.Roles[role]; ok {
		return ids
	}
	return fc.Default
}

// ReadCredential returns the workload credential: the first line of file when file is set, else
// env (the value of BAP_ORCHESTRATOR_TOKEN). Surrounding whitespace is trimmed. An empty result
// means no credential.
func ReadCredential(file, env string) (string, error) {
	if file == "" {
		return strings.TrimSpace(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		// The path, never the content, is in the message.
		return "", fmt.Errorf("orchestrator credential file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	tok := strings.TrimSpace(line)
	if tok == "" {
		return "", fmt.Errorf("orchestrator credential file %s is empty", file)
	}
	if strings.ContainsAny(tok, " \t\r") {
		return "", fmt.Errorf("orchestrator credential file %s: the token must be one word on the first line", file)
	}
	return tok, nil
}
