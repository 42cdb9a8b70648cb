package app

import (
	"fmt"
	"slices"
	"strings"

	"github.com/originweave/bap/server/internal/policy"
)

// Engines (issue #19, ADR 0025). A node runs sessions on one or more browser engines, each driven
// by an adapter behind the Browser port. The use-cases know an engine only as a name the client
// chose (recorded with the session and its checkpoints) and a set of capabilities; they never
// branch on the name, only on what the engine can do.

// Engine is a browser engine this node is configured to run, as its registry describes it.
type Engine struct {
	Name      string // "chromium", "firefox": the spec's BrowserEngine
	AdapterID string // the protocol adapter that drives it ("cdp"), as protocol_adapter names it
	// Version is the browser's version as it reported it when it (last) started ("" while its
	// browser does not run).
	Version string
	// Available tells whether its browser runs on this node now.
	Available bool
	// Unavailable says, for people, why it may not run and what to install ("" when it runs).
	Unavailable  string
	Capabilities []Capability
}

// Has reports whether the engine can do c.
func (e Engine) Has(c Capability) bool { return slices.Contains(e.Capabilities, c) }

// Capability is something an engine adapter may or may not do: the spec's EngineCapability.
type Capability string

// The capabilities of the spec's EngineCapability, with the operation each one gates.
const (
	CapMHTMLEvidence Capability = "mhtml_evidence" // capture_evidence dom_snapshot
	CapLiveView      Capability = "live_view"      // the console's live view (WatchSession)
	CapFileUpload    Capability = "file_upload"    // act upload_file
	CapRequestHolds  Capability = "request_holds"  // opening a session for a form_submission policy
	CapDownloads     Capability = "downloads"      // downloads kept as artifacts (no operation to refuse)
)

// SessionEngine is implemented by browser ports that tell which engine an open session runs on.
type SessionEngine interface {
	SessionEngine(sessionID string) (engine string, ok bool)
}

// Engines lists the engines this node is configured to run, its default first; none without a
// browser port.
func (s *Service) Engines() []Engine {
	if s.cfg.Browser == nil {
		return nil
	}
	return s.cfg.Browser.Engines()
}

// engineNamed finds a configured engine by name.
func (s *Service) engineNamed(name string) (Engine, bool) {
	for _, e := range s.Engines() {
		if e.Name == name {
			return e, true
		}
	}
	return Engine{}, false
}

// chooseEngine resolves the engine a session opens on: name, else the checkpoint's engine (want),
// else the node's default. An engine the node does not run answers 503 browser_unavailable naming
// it; the name's spelling was checked against the spec by the transport.
func (s *Service) chooseEngine(name, want string) (Engine, error) {
	if name == "" {
		name = want
	}
	engines := s.Engines()
	if name == "" {
		if len(engines) == 0 {
			_, err := s.browserOrUnavailable() // no browser port: says what to install
			return Engine{}, err
		}
		name = engines[0].Name
	}
	e, ok := s.engineNamed(name)
	if !ok {
		runs := "none"
		if len(engines) > 0 {
			names := make([]string, 0, len(engines))
			for _, e := range engines {
				names = append(names, e.Name)
			}
			runs = strings.Join(names, ", ")
		}
		return Engine{}, Errorf(CodeBrowserUnavailable, "this node does not run the browser engine %s (it runs: %s)", name, runs)
	}
	if !e.Available {
		detail := fmt.Sprintf("the browser engine %s does not run on this node now", name)
		if e.Unavailable != "" {
			detail += ": " + e.Unavailable
		}
		return Engine{}, &Error{Code: CodeBrowserUnavailable, Detail: detail}
	}
	return e, nil
}

// requireCapability refuses with 501 engine_capability_unsupported what the engine of a session
// cannot do. A session whose engine this node does not know (recorded elsewhere) passes: the
// browser call then answers for itself.
func (s *Service) requireCapability(engine string, c Capability, what string) error {
	e, ok := s.engineNamed(engine)
	if !ok || e.Has(c) {
		return nil
	}
	return Errorf(CodeEngineCapabilityUnsupported, "the session runs on %s, which cannot %s (capability %s; GET /bap/v1 lists each engine's capabilities)", engine, what, c)
}

// policyNeeds lists the capabilities a session of a task governed by pol needs from its engine: a
// form_submission rule is enforced by holding requests inside the browser, so an engine that
// cannot hold them must not run the task (fail closed).
func policyNeeds(pol *policy.Policy) []Capability {
	if pol.HoldsRequests() {
		return []Capability{CapRequestHolds}
	}
	return nil
}

// engineVersion is the version of e's browser now (it may have started since e was read).
func (s *Service) engineVersion(e Engine) string {
	if now, ok := s.engineNamed(e.Name); ok && now.Version != "" {
		return now.Version
	}
	return e.Version
}
