// Package browser is BAP's Chromium adapter: one headless Chromium per node,
// an isolated browser context per BAP browser session, the task's origin
// policy enforced at the network layer, a session-scoped registry of opaque
// node handles bound to document epochs, and the typed operations navigate,
// observe, query_nodes, act and extract.
//
// It is the only package that imports chromedp and cdproto (enforced by
// server/internal/archtest); only opaque ids (ctx_, ep_, nd_) and the value
// types of api.go leave it. No raw target, frame, loader, node, backend-node,
// execution-context or session id is ever returned, put in an error or in an
// event (TestNoRawCDPIdsReachClients scans everything a client can see).
//
// # Process and sessions
//
// [Start] runs the browser over chromedp's pipe transport
// (--remote-debugging-pipe) with a fresh user-data dir; the protocol layer
// (cdp.go) multiplexes flat sessions itself, because every page, popup,
// out-of-process iframe and worker is auto-attached paused
// (Target.setAutoAttach with waitForDebuggerOnStart) and set up before it
// runs. Each [Session] is a browser context (Target.createBrowserContext)
// with a first tab; Config.WarmContexts contexts are kept ready so that
// OpenSession is a hand-over. Popups and target=_blank open new browsing
// contexts (ctx_) of the same session, reported in ActResult.NewContexts,
// Snapshot.Contexts and a context.opened event. A crashed renderer marks its
// session lost ([ErrSessionLost], event session.lost); a browser that dies
// marks every session lost and is restarted with back-off. Idle sessions are
// closed after Config.IdleTimeout (event session.closed).
//
// # Origin policy
//
// See netpolicy.go for what is covered: Fetch interception of every request
// of every attached target (frames, redirects, subresources, EventSource,
// workers), a refused navigation answered with 204 so the frame keeps its
// document, and a connect-src Content-Security-Policy for WebSockets.
//
// # Handles and epochs
//
// Each tab has an epoch (ep_) that changes whenever its main frame commits a
// new document (navigation, reload, history, document.open). Frames have
// document generations of their own. A handle (nd_, see handles.go) names an
// element by its index in the page agent's registry of one frame's document;
// it answers [ErrStaleNodeHandle] as soon as its tab's epoch, its frame's
// document or the agent's world changes, or when the element left the
// document, and never resolves to another element. Handles are never reused
// within a session.
//
// # The page agent
//
// Observe, query, actionability checks and extraction run agent.js, a fixed
// script installed in an isolated world of every frame (page scripts cannot
// see or change it; clients cannot run JavaScript). One walk of the flat tree
// (open shadow roots and slots included) computes roles and accessible names
// the way Chromium does for the common cases of plain HTML; for custom
// elements (whose role and states may live in ElementInternals) and controls
// inside shadow trees it takes Chromium's own accessibility tree's word
// (ax.go, ADR 0014). The server stitches the frames' snapshots (same- and
// cross-origin, in or out of process) under their iframe nodes. Interactive mode (the default) keeps every actionable node plus
// headings with text of their own, frames and dialogs; full mode keeps every
// node with a role and the text runs.
//
// # Actions
//
// An action waits until its target is attached, visible, stable (same box in
// two animation frames; pointer actions), enabled, editable (fill) and hit by
// the pointer at its centre through every enclosing frame (judged on the flat
// tree: slotted content and the target's own shadow hosts are the target; a
// label forwards to its control; a hidden or covered checkbox is clicked
// through its label or host), else it returns
// [ActionTimeoutError] naming the blocker ("covered by another element
// (div#overlay)", "disabled", …). Mouse and keyboard input is dispatched
// with Input.* to the tab; select_option on a component's select opens it and
// clicks the choice by name. After the action, the call returns once a
// navigation it started has loaded (Navigated, new EpochID) and the
// navigations it started in subframes have stopped loading, popups it opened
// are attached, downloads it started have finished (Content kept up to
// Config.MaxDownloadBytes), and reports the dialogs it answered. fill values
// and uploaded files are never logged or put in events.
package browser
