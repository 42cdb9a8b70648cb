package browser

import (
	"crypto/tls"
	"log/slog"
	"net/netip"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/originweave/bap/server/internal/page"
)

// The request, result and error types are those of server/internal/page,
// the vocabulary the use-cases share with this adapter (so that app never
// imports chromedp); they are aliased here so that a *Session satisfies
// app.BrowserSession as it is.

// Config configures [Start].
type Config struct {
	// Binary is the browser executable. "" looks up chromium,
	// chromium-browser and google-chrome on PATH (BAP_CHROMIUM is the
	// caller's business).
	Binary string
	// Logger receives operational logs; nil discards them. Protected input
	// (fill values, file contents) is never logged.
	Logger *slog.Logger
	// MaxSessions caps the open sessions of this node; 0 means 32.
	MaxSessions int
	// IdleTimeout closes sessions that ran no operation for this long; 0
	// means 10 minutes, a negative value disables reaping.
	IdleTimeout time.Duration
	// WarmContexts is how many browser contexts (each with its first tab)
	// are kept ready for OpenSession; 0 means 2, a negative value none.
	WarmContexts int
	// MaxDownloadBytes caps the size of one captured download; a larger
	// download is cancelled and reported without content. 0 means 25 MiB.
	MaxDownloadBytes int64
	// NoDocumentCSP turns off the Content-Security-Policy (connect-src)
	// that keeps WebSocket connections within the policy. It is added by
	// fulfilling each HTML document anew, which buffers the document before
	// it renders (about 5–20 ms per navigation); without it, HTTP(S) is
	// still checked for every request but WebSockets may reach any origin.
	NoDocumentCSP bool
	// ExtraFlags are appended to the browser command line (tests).
	ExtraFlags []string
	// ServerAddrs are the server's own TCP listeners: no page reaches them, whatever its policy
	// names (egress.Config.Forbidden).
	ServerAddrs []netip.AddrPort
	// UpstreamTLS configures the egress proxies' TLS towards sites whose tunnels they open (a
	// recording or replaying session's HTTPS; egress.Config.UpstreamTLS): nil verifies against
	// the system's roots. Tests trust their own sites' certificates with it.
	UpstreamTLS *tls.Config
	// TrustSPKI are more public-key hashes (base64 SHA-256 of a SubjectPublicKeyInfo) whose
	// certificates the browser accepts beside its own roots and its proxies' authority: tests
	// trust their own HTTPS sites with it, to measure or drive them without a recording proxy.
	TrustSPKI []string

	// cspBodyTimeout bounds the wait for a document's body before the connect-src CSP is added
	// to it; past it the document goes on without (the proxy still guards it). 0 means 60 s.
	cspBodyTimeout time.Duration
	// transport wraps the connection to the browser (tests count its messages: wire_test.go);
	// nil uses it as it is.
	transport func(chromedp.Transport) chromedp.Transport
	// RunAsUser is the OS account Chromium runs as when this process runs
	// as root (Chromium's sandbox refuses root); "" means DefaultRunAsUser.
	// The account must not be root; its profile, downloads and crash dumps
	// live in directories only it can write. When this process is not root,
	// Chromium runs as the current user and RunAsUser must be empty or name
	// that user.
	RunAsUser string
	// NoSandbox starts Chromium with --no-sandbox, for machines where its
	// sandbox cannot start (Start otherwise fails with a [SandboxError]
	// naming the fix). Without the sandbox a page that exploits the renderer
	// runs with the browser user's full rights; a WARN line says so at start.
	NoSandbox bool
}

// Errors (the same values as page's, so errors.Is works with either name).
var (
	ErrUnavailable     = page.ErrUnavailable
	ErrStaleNodeHandle = page.ErrStaleNodeHandle
	ErrSessionLost     = page.ErrSessionLost
	ErrNoSuchContext   = page.ErrNoSuchContext
	ErrNoSuchNode      = page.ErrNoSuchNode
	ErrSessionClosed   = page.ErrSessionClosed
	ErrTooManySessions = page.ErrTooManySessions
	ErrSessionExists   = page.ErrSessionExists
	ErrInvalidRequest  = page.ErrInvalidRequest
	ErrNoSuchHold      = page.ErrNoSuchHold
	ErrHoldAbandoned   = page.ErrHoldAbandoned
)

// Error types.
type (
	// OriginNotAllowedError reports a navigation refused by the policy.
	OriginNotAllowedError = page.OriginNotAllowedError
	// SecretOriginError reports a secret fill refused for the field's origin (nothing typed).
	SecretOriginError = page.SecretOriginError
	// ActionTimeoutError reports a target that did not become actionable.
	ActionTimeoutError = page.ActionTimeoutError
	// NavigationError reports a navigation the browser could not complete.
	NavigationError = page.NavigationError
	// StoppedError reports a navigation or action its caller's context
	// cancelled (cancel_task) before it finished.
	StoppedError = page.StoppedError
)

// Request and result types.
type (
	// HeldRequest is a request held inside the browser for approval (hold.go).
	HeldRequest = page.HeldRequest
	// NavigateRequest is the input of Session.Navigate.
	NavigateRequest = page.NavigateRequest
	// NavigateResult is the outcome of a navigation.
	NavigateResult = page.NavigateResult
	// ObserveRequest is the input of Session.Observe.
	ObserveRequest = page.ObserveRequest
	// Snapshot is the compact view of a browsing context.
	Snapshot = page.Snapshot
	// ContextInfo describes one browsing context of a session.
	ContextInfo = page.ContextInfo
	// Node is one node of a snapshot or query result.
	Node = page.Node
	// Query is a typed node query.
	Query = page.Query
	// QueryRequest is the input of Session.QueryNodes.
	QueryRequest = page.QueryRequest
	// QueryResult holds the matches, best first.
	QueryResult = page.QueryResult
	// ActRequest is the input of Session.Act and Session.ClassifyAction.
	ActRequest = page.ActRequest
	// File is a file for upload_file.
	File = page.File
	// ActResult is the outcome of an action.
	ActResult = page.ActResult
	// ExtractRequest is the input of Session.Extract.
	ExtractRequest = page.ExtractRequest
	// ExtractResult holds the extracted data.
	ExtractResult = page.ExtractResult
	// Table is the data of a table extract.
	Table = page.Table
	// Link is one entry of a links extract.
	Link = page.Link
	// Dialog is a JavaScript dialog the session handled.
	Dialog = page.Dialog
	// Download is a file the page downloaded during an action.
	Download = page.Download
	// Event is something that happened in a session.
	Event = page.Event
	// ScreenshotRequest is the input of Session.Screenshot.
	ScreenshotRequest = page.ScreenshotRequest
	// LiveFrame is one frame of Session.Watch.
	LiveFrame = page.LiveFrame
)

// Wait conditions of NavigateRequest.WaitUntil.
const (
	WaitCommit           = page.WaitCommit
	WaitLoad             = page.WaitLoad
	WaitDOMContentLoaded = page.WaitDOMContentLoaded
	WaitNetworkIdle      = page.WaitNetworkIdle
)

// Observe modes.
const (
	ModeInteractive = page.ModeInteractive
	ModeFull        = page.ModeFull
)

// Actions of ActRequest.Action.
const (
	ActionClick          = page.ActionClick
	ActionFill           = page.ActionFill
	ActionClear          = page.ActionClear
	ActionSelectOption   = page.ActionSelectOption
	ActionCheck          = page.ActionCheck
	ActionUncheck        = page.ActionUncheck
	ActionPressKey       = page.ActionPressKey
	ActionHover          = page.ActionHover
	ActionFocus          = page.ActionFocus
	ActionScrollIntoView = page.ActionScrollIntoView
	ActionUploadFile     = page.ActionUploadFile
)

// Effects returned by ClassifyAction and set in ActResult.Effect.
const (
	EffectFormSubmission = page.EffectFormSubmission
	EffectFileUpload     = page.EffectFileUpload
	EffectAnyAction      = page.EffectAnyAction
)

// Extract kinds.
const (
	ExtractText       = page.ExtractText
	ExtractTable      = page.ExtractTable
	ExtractAttributes = page.ExtractAttributes
	ExtractLinks      = page.ExtractLinks
	ExtractSchema     = page.ExtractSchema
)

// Event types passed to the onEvent callback of OpenSession.
const (
	EventNavigationCommitted = page.EventNavigationCommitted
	EventRequestBlocked      = page.EventRequestBlocked
	EventContextOpened       = page.EventContextOpened
	EventContextClosed       = page.EventContextClosed
	EventDialogHandled       = page.EventDialogHandled
	EventDownloadCompleted   = page.EventDownloadCompleted
	EventSessionLost         = page.EventSessionLost
	// EventSessionClosed reports a session the idle reaper closed
	// (data.reason "idle").
	EventSessionClosed = "session.closed"
)
