package page

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrUnavailable reports that no browser can be run on this node: no binary
// was found, the browser would not start, or it is restarting. The errors that
// wrap it say which, and what to fix.
var ErrUnavailable = errors.New("browser unavailable")

// ErrStaleNodeHandle reports a node handle whose document epoch has ended
// (the browsing context navigated, reloaded or replaced its document, or the
// frame holding the node did).
var ErrStaleNodeHandle = errors.New("stale node handle")

// ErrObservationStale reports an observe since or cursor naming an observation
// of an earlier document epoch of its browsing context.
var ErrObservationStale = errors.New("observation of an earlier document epoch")

// ErrNoSuchObservation reports an observe since or cursor naming an observation
// the session does not keep (never made, of another context, or no longer
// among the recent ones it keeps).
var ErrNoSuchObservation = errors.New("no such observation")

// ErrSessionLost reports a session whose browser or renderer crashed; the
// session cannot be used any more.
var ErrSessionLost = errors.New("browser session lost")

// ErrNoSuchContext reports a context_id that is not an open browsing context
// of the session.
var ErrNoSuchContext = errors.New("no such browsing context")

// ErrNoSuchNode reports a node handle that this session never issued, or a
// query that matched nothing.
var ErrNoSuchNode = errors.New("no such node")

// ErrUnknownHandle is the [ErrNoSuchNode] of a node handle the session's registry never issued
// (as opposed to a live handle used where it does not belong): the runtime then asks its records
// whether another, ended session issued it (a stale handle, not an unknown one).
var ErrUnknownHandle = fmt.Errorf("%w: unknown node handle", ErrNoSuchNode)

// ErrSessionClosed reports an operation on a session that was closed (by the
// caller, by the idle reaper or by [Browser.Close]).
var ErrSessionClosed = errors.New("browser session closed")

// ErrTooManySessions reports that the node already runs MaxSessions
// sessions.
var ErrTooManySessions = errors.New("too many browser sessions on this node")

// ErrSessionExists reports an OpenSession with the id of an open session.
var ErrSessionExists = errors.New("browser session id already in use")

// ErrNoSuchHold reports a release or a denial of a held request that the session does not hold
// (never held, released or denied already, or abandoned by the page).
var ErrNoSuchHold = errors.New("no such held request")

// ErrHoldAbandoned reports a held request the page gave up while it waited (it navigated away,
// closed, or aborted it): releasing it sent nothing.
var ErrHoldAbandoned = errors.New("the page abandoned the held request")

// ErrInvalidRequest is wrapped by errors about a request's arguments (an
// unknown action or extract kind, a missing value, an action the target node
// does not support); the message says what is wrong.
var ErrInvalidRequest = errors.New("invalid browser request")

// SecretOriginError reports a fill from a secret whose target field's document is not on one of
// the secret's origins: nothing was typed.
type SecretOriginError struct {
	// Origin is the origin of the document holding the field ("" when it has none, e.g. about:blank).
	Origin string
}

// Error names the field's origin, never the secret.
func (e *SecretOriginError) Error() string {
	return fmt.Sprintf("the field is in a document of %q, not one of the secret's origins", e.Origin)
}

// OriginNotAllowedError reports a navigation (or a request it needs) to an
// origin the session's policy does not allow. Nothing was loaded.
type OriginNotAllowedError struct {
	// URL is the refused URL without userinfo, query or fragment.
	URL string
}

// Error names the refused origin and path, never a query string.
func (e *OriginNotAllowedError) Error() string {
	return fmt.Sprintf("origin not allowed by the task policy: %s", e.URL)
}

// ActionTimeoutError reports an action whose target did not become actionable
// within the timeout.
type ActionTimeoutError struct {
	// Reason names the blocker: "not attached", "not visible", "not
	// stable", "disabled", "covered by another element (div#overlay)",
	// "read-only", "navigation did not finish", ….
	Reason string
}

// Error names the blocker.
func (e *ActionTimeoutError) Error() string { return "action timed out: " + e.Reason }

// NavigationError reports a navigation the browser could not complete
// (connection refused, DNS failure, …) for a reason other than the policy.
type NavigationError struct {
	// URL is the URL without userinfo, query or fragment.
	URL string
	// Reason is the browser's error text, such as net::ERR_CONNECTION_REFUSED.
	Reason string
}

// Error names the URL and the reason.
func (e *NavigationError) Error() string {
	return fmt.Sprintf("navigation to %s failed: %s", e.URL, e.Reason)
}

// StoppedError reports a navigation or action that its caller stopped (its
// context was cancelled, as cancel_task does; a deadline is an
// ActionTimeoutError instead) before it finished. A stopped navigation is
// stopped in the browser too (nothing of it goes on loading).
type StoppedError struct {
	// Started reports that the operation may have reached the page: a
	// navigation was requested, or an action's input may have been
	// dispatched. False means provably nothing was sent.
	Started bool
	// Committed reports, for a navigation, that it committed a new document
	// before it was stopped, or that the browser did not confirm it had not
	// (the browsing context's document may have changed). False with
	// Started means the browser reported the navigation aborted before
	// commit: the context keeps its document.
	Committed bool
}

// Error says how far the operation got.
func (e *StoppedError) Error() string {
	switch {
	case !e.Started:
		return "stopped before it reached the page"
	case e.Committed:
		return "stopped after it may have changed the page"
	}
	return "stopped before the new document committed"
}

// Wait conditions of NavigateRequest.WaitUntil.
const (
	WaitCommit           = "commit"
	WaitLoad             = "load"
	WaitDOMContentLoaded = "domcontentloaded"
	WaitNetworkIdle      = "networkidle"
)

// Observe modes.
const (
	ModeInteractive = "interactive"
	ModeFull        = "full"
)

// Actions of ActRequest.Action (CONTRACT "Actions and queries").
const (
	ActionClick          = "click"
	ActionFill           = "fill"
	ActionClear          = "clear"
	ActionSelectOption   = "select_option"
	ActionCheck          = "check"
	ActionUncheck        = "uncheck"
	ActionPressKey       = "press_key"
	ActionHover          = "hover"
	ActionFocus          = "focus"
	ActionScrollIntoView = "scroll_into_view"
	ActionUploadFile     = "upload_file"
)

// Effects returned by ClassifyAction and set in ActResult.Effect (the
// policy.Effect values).
const (
	EffectFormSubmission = "form_submission"
	EffectFileUpload     = "file_upload"
	EffectAnyAction      = "any_action"
)

// Extract kinds.
const (
	ExtractText       = "text"
	ExtractTable      = "table"
	ExtractAttributes = "attributes"
	ExtractLinks      = "links"
	ExtractSchema     = "schema"
)

// Event types passed to the onEvent callback of OpenSession.
const (
	EventNavigationCommitted = "navigation.committed"
	EventRequestBlocked      = "request.blocked"
	EventContextOpened       = "context.opened"
	EventContextClosed       = "context.closed"
	EventDialogHandled       = "dialog.handled"
	EventDownloadCompleted   = "download.completed"
	EventSessionLost         = "session.lost"
	// EventRecordTruncated: the session's WARC archive lacks something (policy.record); reported
	// by the recorder, not the engine. Data: reason, limit_bytes, url.
	EventRecordTruncated = "record.truncated"
)

// Recorder archives what a session exchanges (a task's policy.record). The composition root
// makes it and the use-cases hand it to the session (Record); an engine adapter passes it to the
// session's egress proxy, whose own interface (egress.Recorder) it also implements. The proxy
// closes it when the session ends.
type Recorder interface {
	Close() error
}

// Archive answers a replay's requests from its task's recorded archive instead of the network
// (ADR 0035): the composition root makes it (warcrecord.Archive) and the use-cases hand it to the
// session (ServeFrom); an engine adapter passes it to the session's egress proxy, whose own
// interface (egress.Archive) it also implements.
type Archive interface {
	// Len is the number of exchanges it can answer from.
	Len() int
	// Altered lists the target URIs of exchanges changed after they were recorded (their records'
	// digests do not hold): answered as they are, and reported by the replay's verdict.
	Altered() []string
}

// NavigateRequest is the input of Session.Navigate.
type NavigateRequest struct {
	// ContextID is the browsing context; "" means the session's default.
	ContextID string `json:"context_id,omitempty"`
	// URL is an absolute http(s) URL or about:blank.
	URL string `json:"url"`
	// WaitUntil is load (default), commit, domcontentloaded or networkidle
	// (the spec's WaitUntil values).
	WaitUntil string `json:"wait_until,omitempty"`
	// Timeout bounds the navigation; 0 means 30 s.
	Timeout time.Duration `json:"-"`
}

// NavigateResult is the outcome of a navigation.
type NavigateResult struct {
	ContextID string `json:"context_id"`
	EpochID   string `json:"epoch_id"`
	URL       string `json:"url"`
	Title     string `json:"title"`
	// Status is the HTTP status of the main document (0 for about:blank).
	Status int `json:"status,omitempty"`
}

// ObserveRequest is the input of Session.Observe.
type ObserveRequest struct {
	ContextID string `json:"context_id,omitempty"`
	// Within limits the snapshot to the subtree of this node handle.
	Within string `json:"within,omitempty"`
	// MaxNodes caps the number of nodes; 0 means 5000.
	MaxNodes int `json:"max_nodes,omitempty"`
	// Mode is "interactive" (default: actionable nodes plus the headings,
	// landmarks, text and structure that give them meaning) or "full".
	Mode string `json:"mode,omitempty"`
	// Since is an earlier observation (ob_…) of the same context and epoch: the
	// snapshot then holds only what changed since, marked by Node.Change.
	Since string `json:"since,omitempty"`
	// Cursor is the Continuation.Cursor of an earlier part: the snapshot is the
	// next part of that observation (Within, Mode, MaxNodes and Since must be unset).
	Cursor string `json:"cursor,omitempty"`
	// MaxBytes caps the snapshot's serialized size (0: no cap); what does not fit
	// goes on in further parts (Snapshot.Continuation).
	MaxBytes int `json:"max_bytes,omitempty"`
}

// Continuation is the truncation marker of a snapshot cut by MaxBytes.
type Continuation struct {
	// Cursor asks for the next part (ObserveRequest.Cursor); sealed for one session, and bound
	// to the observation, its context and its document epoch.
	Cursor string `json:"cursor"`
	// Part is this part's number, from 1.
	Part int `json:"part"`
	// RemainingNodes counts the nodes not yet returned.
	RemainingNodes int `json:"remaining_nodes"`
}

// Snapshot is the compact accessibility-oriented view of a browsing context.
type Snapshot struct {
	ContextID string `json:"context_id"`
	EpochID   string `json:"epoch_id"`
	URL       string `json:"url"`
	Title     string `json:"title"`
	Nodes     []Node `json:"nodes"`
	// ObservationID names this observation (ob_…) for a later ObserveRequest.Since.
	ObservationID string `json:"observation_id"`
	// Since is set on a delta: the observation it is relative to.
	Since string `json:"since,omitempty"`
	// ApproxTokens estimates the model tokens of Nodes (JSON bytes / 4, rounded up).
	ApproxTokens int `json:"approx_tokens"`
	// Truncated is true when MaxNodes cut the snapshot short.
	Truncated bool `json:"truncated,omitempty"`
	// Continuation is set when MaxBytes cut this part: the observation goes on.
	Continuation *Continuation `json:"continuation,omitempty"`
	// Contexts lists every open browsing context of the session (popups
	// included).
	Contexts []ContextInfo `json:"contexts,omitempty"`
}

// ContextInfo describes one browsing context (tab or popup) of a session.
type ContextInfo struct {
	ContextID string `json:"context_id"`
	URL       string `json:"url"`
	Title     string `json:"title,omitempty"`
	// Opener is the context that opened this one ("" for the first tab).
	Opener string `json:"opener,omitempty"`
}

// Node is one node of a snapshot or query result.
type Node struct {
	// NodeID is the handle (nd_…), set on every node an action can target
	// and on containers used as "within" scopes.
	NodeID string `json:"node_id,omitempty"`
	// Role is the WAI-ARIA role as Chromium computes it ("text" for a text
	// run, "iframe" for a frame whose document is in Children).
	Role string `json:"role"`
	// Name is the accessible name, trimmed.
	Name string `json:"name,omitempty"`
	// Value is the current value of a form control (never of a password
	// field), or the text of a "text" node.
	Value       string `json:"value,omitempty"`
	Description string `json:"description,omitempty"`
	// URL is the target of a link, or the document URL of an iframe.
	URL         string `json:"url,omitempty"`
	Placeholder string `json:"placeholder,omitempty"`
	// InputType is the type attribute of an input element (email, password, file, …).
	InputType string   `json:"input_type,omitempty"`
	Options   []string `json:"options,omitempty"` // option labels of a select (up to 50)
	Checked   *bool    `json:"checked,omitempty"`
	// Mixed is true for a tri-state control in the mixed state.
	Mixed    bool   `json:"mixed,omitempty"`
	Disabled *bool  `json:"disabled,omitempty"`
	Expanded *bool  `json:"expanded,omitempty"`
	Focused  *bool  `json:"focused,omitempty"`
	Required *bool  `json:"required,omitempty"`
	Selected *bool  `json:"selected,omitempty"`
	ReadOnly *bool  `json:"readonly,omitempty"`
	Level    int    `json:"level,omitempty"`
	Children []Node `json:"children,omitempty"`
	// Change is set only in a delta snapshot: added, changed or removed (the
	// NodeChange values); "" on an unchanged ancestor shown for context.
	Change string `json:"change,omitempty"`
	// Repeated is set only in a part after the first of an observation cut by max_bytes: the
	// node was in an earlier part and is repeated only to place the nodes below it.
	Repeated bool `json:"repeated,omitempty"`
}

// Query is a typed node query (CONTRACT "Actions and queries").
type Query struct {
	Role        string `json:"role,omitempty"`
	Name        string `json:"name,omitempty"`
	Text        string `json:"text,omitempty"`
	Label       string `json:"label,omitempty"`
	Placeholder string `json:"placeholder,omitempty"`
	TestID      string `json:"test_id,omitempty"`
	// Within is a node handle limiting the search to its subtree.
	Within string `json:"within,omitempty"`
	// Exact requires whole, case-sensitive matches (after trimming and
	// collapsing white space); otherwise matching is a case-insensitive
	// substring and exact matches rank first.
	Exact bool `json:"exact,omitempty"`
}

// QueryRequest is the input of Session.QueryNodes.
type QueryRequest struct {
	ContextID string `json:"context_id,omitempty"`
	Query     Query  `json:"query"`
	// Limit caps the result; 0 means 50.
	Limit int `json:"limit,omitempty"`
}

// QueryResult holds the matches, best first.
type QueryResult struct {
	EpochID string `json:"epoch_id"`
	Nodes   []Node `json:"nodes"`
}

// ActRequest is the input of Session.Act and Session.ClassifyAction. The
// target is NodeID or, when it is empty, Query (resolved just before acting
// to its best match).
type ActRequest struct {
	ContextID string `json:"context_id,omitempty"`
	Action    string `json:"action"`
	NodeID    string `json:"node_id,omitempty"`
	Query     *Query `json:"query,omitempty"`
	// Value is the text of fill (protected: never logged), or the option of
	// select_option (matched by value, then label).
	Value  string   `json:"-"`
	Values []string `json:"values,omitempty"`
	// SecretRef names the secret a fill types (sec_…): the caller sends the reference, the
	// service puts the value in Value only for the browser, with the secret's origins.
	SecretRef string `json:"secret_ref,omitempty"`
	// SecretOrigins are the origins the filled secret may go to: the browser types Value only into
	// a field of a document of one of them (else *SecretOriginError). Empty: Value is not a secret.
	SecretOrigins []string `json:"-"`
	// Key is the key of press_key ("Enter", "Tab", "Control+A", "a", …).
	Key   string `json:"key,omitempty"`
	Files []File `json:"-"`
	// Timeout bounds the actionability wait and the navigation the action
	// starts; 0 means 30 s.
	Timeout time.Duration `json:"-"`
	// Approved marks an action a person approved before it ran (an any_action or file_upload
	// hold): the requests it causes are not held again.
	Approved bool `json:"-"`
}

// File is a file for upload_file.
type File struct {
	Name      string
	MediaType string
	Content   []byte
}

// ActResult is the outcome of an action.
type ActResult struct {
	ContextID string `json:"context_id"`
	EpochID   string `json:"epoch_id"`
	// Navigated is true when the action made the context load a new
	// document; EpochID is then the new document's epoch.
	Navigated   bool       `json:"navigated"`
	URL         string     `json:"url,omitempty"`
	NewContexts []string   `json:"new_contexts,omitempty"`
	Dialogs     []Dialog   `json:"dialogs,omitempty"`
	Downloads   []Download `json:"downloads,omitempty"`
	// Effect is the effect ClassifyAction gives for the action.
	Effect string `json:"effect"`
	// Origin is the origin of the document holding the target (what a secret was typed into).
	Origin string `json:"-"`
	// Held is the request the action caused that a form_submission rule holds, unsent, inside
	// the browser until Release or Deny; nil when nothing was held.
	Held *HeldRequest `json:"-"`
}

// HeldRequest is a request with a non-safe method held inside the browser for approval.
type HeldRequest struct {
	// ID names the hold for Release and Deny (session-scoped).
	ID string
	// Method and URL are the request's; URL has no userinfo, query or fragment.
	Method, URL string
	// Rule is the index of the approval rule that holds it.
	Rule int
	// Body is the request's body as the page sent it (protected: it may hold fill values; never
	// logged, stored or shown; digest it).
	Body []byte
	// BodyKnown is false when the browser did not hand over the body (too long, or a file).
	BodyKnown bool
}

// ExtractRequest is the input of Session.Extract.
type ExtractRequest struct {
	ContextID string `json:"context_id,omitempty"`
	Kind      string `json:"kind"`
	NodeID    string `json:"node_id,omitempty"`
	Query     *Query `json:"query,omitempty"`
	// Schema is a JSON Schema the schema kind validates its result against.
	Schema json.RawMessage `json:"schema,omitempty"`
	// Fields maps each property of the schema kind to the query that finds
	// its value (the text, or the value of a form control, of the best match).
	Fields map[string]Query `json:"fields,omitempty"`
}

// ExtractResult holds the extracted data: a string (text), a *Table
// (table), a map[string]string (attributes), a []Link (links) or the
// validated JSON value (schema).
type ExtractResult struct {
	EpochID string `json:"epoch_id"`
	Data    any    `json:"data"`
}

// Table is the data of a table extract.
type Table struct {
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Link is one entry of a links extract.
type Link struct {
	Text string `json:"text"`
	URL  string `json:"url"`
	// NodeID is the link's handle.
	NodeID string `json:"node_id,omitempty"`
}

// Dialog is a JavaScript dialog the session handled.
type Dialog struct {
	// Type is alert, confirm, prompt or beforeunload.
	Type    string `json:"type"`
	Message string `json:"message"`
	// Accepted is false when the dialog was dismissed (the default).
	Accepted bool `json:"accepted"`
}

// Download is a file the page downloaded during an action.
type Download struct {
	Name      string `json:"name"`
	MediaType string `json:"media_type,omitempty"`
	Size      int64  `json:"size"`
	// Content is nil when the download exceeded the size limit, failed,
	// or was cancelled; Reason then says why.
	Content []byte `json:"-"`
	Reason  string `json:"reason,omitempty"`
}

// Event is something that happened in a session, reported to the onEvent
// callback given to OpenSession. It never holds a raw CDP id or protected
// input; URLs carry no query string.
type Event struct {
	// Type is one of the Event* constants.
	Type      string         `json:"type"`
	ContextID string         `json:"context_id,omitempty"`
	EpochID   string         `json:"epoch_id,omitempty"`
	URL       string         `json:"url,omitempty"`
	Data      map[string]any `json:"data,omitempty"`
}

// StorageState is the restorable state of a session that a checkpoint keeps:
// its cookies, the local storage of the origins its documents showed, and per
// browsing context the URL, session storage and viewport. It holds
// credentials (cookies, tokens in storage) and must never reach a client,
// a log or an event.
type StorageState struct {
	Cookies      []Cookie        `json:"cookies"`
	LocalStorage []OriginStorage `json:"local_storage"`
	Contexts     []ContextState  `json:"contexts"`
}

// Cookie is one cookie of a session (the fields a browser needs to set it
// again).
type Cookie struct {
	Name     string  `json:"name"`
	Value    string  `json:"value"`
	Domain   string  `json:"domain"`
	Path     string  `json:"path"`
	Expires  float64 `json:"expires,omitempty"` // seconds since the epoch; 0 for a session cookie
	HTTPOnly bool    `json:"http_only,omitempty"`
	Secure   bool    `json:"secure,omitempty"`
	SameSite string  `json:"same_site,omitempty"` // Strict, Lax, None or ""
}

// OriginStorage is the content of one origin's Web Storage area.
type OriginStorage struct {
	Origin string            `json:"origin"`
	Items  map[string]string `json:"items"`
}

// ContextState is one browsing context of a checkpoint.
type ContextState struct {
	ContextID      string          `json:"context_id"`
	Primary        bool            `json:"primary,omitempty"`
	URL            string          `json:"url"`
	EpochID        string          `json:"epoch_id,omitempty"`
	SessionStorage []OriginStorage `json:"session_storage,omitempty"`
	Width          int             `json:"width,omitempty"` // viewport in CSS pixels
	Height         int             `json:"height,omitempty"`
}

// RestoreResult is the outcome of restoring a StorageState into a fresh
// session: the primary context's new document (a new epoch).
type RestoreResult struct {
	NavigateResult
	Cookies int // cookies set
	Origins int // origins whose storage was written
	// Contexts are the other tabs of the checkpoint, reopened (new ids, in
	// the checkpoint's order), as their navigation left them;
	// ContextsSkipped counts those left out (URL refused by the policy, or
	// their page failed to load).
	Contexts        []NavigateResult
	ContextsSkipped int
	// Events are what the restore's navigations reported, in order; they
	// are not sent to the session's event callback.
	Events []Event
}

// ScreenshotRequest is the input of Session.Screenshot: the viewport of a
// browsing context by default, the whole page with FullPage, or one node's
// box with NodeID.
type ScreenshotRequest struct {
	ContextID string
	FullPage  bool
	NodeID    string
}

// LiveFrameInterval is the live view's cap: at most one frame per 500 ms (2 fps) per session,
// however many watch; the adapter enforces it.
const LiveFrameInterval = 500 * time.Millisecond

// LiveFrame is one frame of a session's live view: a JPEG of the viewport of the browsing
// context the agent last worked in. Frames are shown, never stored.
type LiveFrame struct {
	ContextID string
	JPEG      []byte
	At        time.Time
}
