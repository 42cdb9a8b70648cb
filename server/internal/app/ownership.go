package app

import (
	"context"
	"errors"
	"time"
)

// Several `bap serve` nodes share one database (ADR 0012). What lives in a node's memory has an
// owner: a browser session (and its handles, its last-used context) belongs to the node that
// opened it, an action held for approval to the node that held it, a two-phase command between its
// phases to the node that runs it. A request for such an object that reaches another node is
// forwarded to the owner by the transport; this file answers "who owns it, and is it alive".
// A dead owner (stopped, or its heartbeat older than Config.NodeStaleAfter) is never forwarded
// to: what it held is gone, and the request is handled here (a session is then reported lost).

// Owners is the store's directory of owners. The store implements it; a store that does not (a
// test double) makes every object local.
type Owners interface {
	// SessionOwner names the node of an open browser session of tenant (zero NodeRef when the
	// session is unknown, of another tenant, or not open).
	SessionOwner(ctx context.Context, tenant, sessionID string, staleBefore time.Time) (NodeRef, error)
	// ApprovalOwner names the node holding the action of a pending approval of tenant that holds
	// one (zero NodeRef otherwise).
	ApprovalOwner(ctx context.Context, tenant, approvalID string, staleBefore time.Time) (NodeRef, error)
	// TaskOwner names the node of the task's most recently used open browser session (the one
	// whose latest document started last; zero NodeRef when it has none).
	TaskOwner(ctx context.Context, tenant, taskID string, staleBefore time.Time) (NodeRef, error)
	// NodeLive reports whether a node is running and heartbeating since staleBefore.
	NodeLive(ctx context.Context, nodeID string, staleBefore time.Time) (bool, error)
}

// NodeRef is a node as the registry knows it.
type NodeRef struct {
	NodeID string
	// URL is the node's advertised URL (--advertise-url).
	URL string
	// Live: not stopped, and heartbeating.
	Live bool
}

// OwnedKind names the kind of object a request targets.
type OwnedKind int

// The kinds of objects with an owner node.
const (
	OwnedSession  OwnedKind = iota + 1 // every /browser-sessions/{session_id}/… operation
	OwnedApproval                      // resolve_approval: the node holding the approved action
	OwnedTask                          // cancel_task, close_task: the node of the task's browser work
)

// NodeID is this node's id.
func (s *Service) NodeID() string { return s.cfg.NodeID }

// RemoteOwner reports the other live node that must handle a request on the object (kind, id)
// for actor, or ok=false when this node handles it: it holds the object, nobody does, the owner is
// dead, or the object is unknown (the local handler answers 404).
func (s *Service) RemoteOwner(ctx context.Context, actor Actor, kind OwnedKind, id string) (NodeRef, bool, error) {
	stale := s.cfg.Now().Add(-s.cfg.NodeStaleAfter)
	var ref NodeRef
	var err error
	switch kind {
	case OwnedSession:
		if s.cfg.Browser != nil {
			if _, held := s.cfg.Browser.Session(id); held {
				return NodeRef{}, false, nil
			}
		}
		ref, err = s.store.SessionOwner(ctx, actor.Tenant, id, stale)
	case OwnedApproval:
		if _, held := s.heldAction(id); held {
			return NodeRef{}, false, nil
		}
		ref, err = s.store.ApprovalOwner(ctx, actor.Tenant, id, stale)
	case OwnedTask:
		ref, err = s.store.TaskOwner(ctx, actor.Tenant, id, stale)
	default:
		return NodeRef{}, false, errors.New("app: unknown owned kind")
	}
	if err != nil || ref.NodeID == "" || ref.NodeID == s.cfg.NodeID || !ref.Live || ref.URL == "" {
		return NodeRef{}, false, err
	}
	return ref, true, nil
}

// heldElsewhere is the refusal of a request on a session another live node holds, made to this
// node directly (a transport that does not forward, or a race with the routing decision). It is
// refused before it becomes a command, so a retry with the same key runs it.
func heldElsewhere() *Error {
	return &Error{Code: CodeBrowserUnavailable, RetryAfter: time.Second,
		Detail: "this browser session is held by another node of the cluster; send the request again (it is forwarded to that node)"}
}

// errSessionElsewhere is the dispatch error of a command on a session that another live node
// holds: nothing was sent to the browser.
var errSessionElsewhere = errors.New("the browser session is held by another live node")

// checkHeldHere refuses a request on an open session that another live node holds. A session of
// a dead node, or one nobody holds, passes: liveSession then reports it lost.
func (s *Service) checkHeldHere(ctx context.Context, rec *SessionRecord) error {
	elsewhere, err := s.heldByOtherLiveNode(ctx, rec)
	if err != nil {
		return err
	}
	if elsewhere {
		return heldElsewhere()
	}
	return nil
}

// heldByOtherLiveNode reports whether an open session belongs to another node that is alive.
func (s *Service) heldByOtherLiveNode(ctx context.Context, rec *SessionRecord) (bool, error) {
	if rec.State != SessionOpen || rec.NodeID == "" || rec.NodeID == s.cfg.NodeID {
		return false, nil
	}
	if s.cfg.Browser != nil {
		if _, held := s.cfg.Browser.Session(rec.ID); held {
			return false, nil
		}
	}
	return s.store.NodeLive(ctx, rec.NodeID, s.cfg.Now().Add(-s.cfg.NodeStaleAfter))
}

// checkApprovalHere refuses to resolve, on this node, an approval whose held action lives on
// another live node: approving it here would record the approval without running the action.
func (s *Service) checkApprovalHere(ctx context.Context, actor Actor, approvalID string) error {
	if _, held := s.heldAction(approvalID); held {
		return nil
	}
	if _, elsewhere, err := s.RemoteOwner(ctx, actor, OwnedApproval, approvalID); err != nil || !elsewhere {
		return err
	}
	return &Error{Code: CodeBrowserUnavailable, RetryAfter: time.Second,
		Detail: "the action this approval holds waits on another node of the cluster; send the request again (it is forwarded to that node)"}
}
