package browser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// This file is the protocol layer: one connection to the browser (chromedp's
// pipe transport), flat sessions multiplexed over it, replies routed by id and
// events delivered in order to one handler per session. chromedp's own
// Browser/Target machinery is not used: it keeps a DOM mirror per target and
// drops the messages of sessions it did not create, and this package needs
// every auto-attached target (popups, out-of-process iframes, workers) paused
// until its request interception is on.

// errConnClosed is returned by calls on a connection whose browser is gone.
var errConnClosed = errors.New("connection to the browser closed")

// errDetached is returned by calls on a session the browser detached.
var errDetached = errors.New("target detached")

// conn is one connection to a browser.
type conn struct {
	tr  chromedp.Transport
	log *slog.Logger

	next atomic.Int64

	mu       sync.Mutex
	pending  map[int64]*pendingCall
	sessions map[target.SessionID]*cdpSession
	closed   bool

	root *cdpSession
	// done is closed when the reader stops (the browser closed the pipe or
	// the connection was closed).
	done chan struct{}
	// readErr is why the reader stopped; valid after done is closed.
	readErr error
}

type pendingCall struct {
	session target.SessionID
	ch      chan *cdproto.Message // nil for a fired command
	method  string
}

// newConn starts reading tr.
func newConn(tr chromedp.Transport, log *slog.Logger) *conn {
	c := &conn{
		tr:       tr,
		log:      log,
		pending:  make(map[int64]*pendingCall),
		sessions: make(map[target.SessionID]*cdpSession),
		done:     make(chan struct{}),
	}
	c.root = c.newSession("")
	go c.read()
	return c
}

// close closes the transport; the reader then stops.
func (c *conn) close() error {
	return c.tr.Close()
}

func (c *conn) read() {
	defer func() {
		c.mu.Lock()
		c.closed = true
		pend := c.pending
		c.pending = map[int64]*pendingCall{}
		sess := c.sessions
		c.sessions = map[target.SessionID]*cdpSession{}
		c.mu.Unlock()
		for _, p := range pend {
			if p.ch != nil {
				close(p.ch)
			}
		}
		for _, s := range sess {
			s.detach()
		}
		c.root.detach()
		close(c.done)
	}()
	for {
		msg := new(cdproto.Message)
		if err := c.tr.Read(context.Background(), msg); err != nil {
			c.readErr = err
			return
		}
		if msg.ID != 0 {
			c.mu.Lock()
			p := c.pending[msg.ID]
			delete(c.pending, msg.ID)
			c.mu.Unlock()
			switch {
			case p == nil:
			case p.ch != nil:
				p.ch <- msg // buffered
			case msg.Error != nil:
				c.log.Debug("browser command failed", "method", p.method, "err", msg.Error)
			}
			continue
		}
		if msg.Method == "" {
			continue
		}
		// Register a new session before anything else of it is read, and
		// retire a detached one after the events that precede the detach.
		switch string(msg.Method) {
		case target.AttachedToTarget.Method:
			var ev target.EventAttachedToTarget
			if err := jsonv2.Unmarshal(msg.Params, &ev, chromedp.DefaultUnmarshalOptions); err == nil && ev.SessionID != "" {
				c.mu.Lock()
				if _, ok := c.sessions[ev.SessionID]; !ok {
					c.sessions[ev.SessionID] = c.newSession(ev.SessionID)
				}
				c.mu.Unlock()
			}
		case target.DetachedFromTarget.Method:
			var ev target.EventDetachedFromTarget
			if err := jsonv2.Unmarshal(msg.Params, &ev, chromedp.DefaultUnmarshalOptions); err == nil {
				c.mu.Lock()
				s := c.sessions[ev.SessionID]
				delete(c.sessions, ev.SessionID)
				var failed []*pendingCall
				for id, p := range c.pending {
					if p.session == ev.SessionID {
						failed = append(failed, p)
						delete(c.pending, id)
					}
				}
				c.mu.Unlock()
				for _, p := range failed {
					if p.ch != nil {
						close(p.ch)
					}
				}
				c.dispatch(msg)
				if s != nil {
					s.detach()
				}
				continue
			}
		}
		c.dispatch(msg)
	}
}

func (c *conn) dispatch(msg *cdproto.Message) {
	c.mu.Lock()
	s := c.sessions[msg.SessionID]
	c.mu.Unlock()
	if msg.SessionID == "" {
		s = c.root
	}
	if s != nil {
		s.push(msg)
	}
}

// session returns the session with the id, if it is attached.
func (c *conn) session(id target.SessionID) *cdpSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions[id]
}

// cdpSession is one flat protocol session (the browser's when id is "").
// It satisfies cdp.Session.
type cdpSession struct {
	c  *conn
	id target.SessionID

	mu       sync.Mutex
	queue    []*cdproto.Message
	handler  func(ev any)
	wake     chan struct{}
	detached chan struct{}
	once     sync.Once
	// pushed counts the events read for the session, handled those its
	// handler has run for; progress is closed (and replaced) when handled grows.
	pushed, handled uint64
	progress        chan struct{}
}

func (c *conn) newSession(id target.SessionID) *cdpSession {
	s := &cdpSession{
		c:        c,
		id:       id,
		wake:     make(chan struct{}, 1),
		detached: make(chan struct{}),
		progress: make(chan struct{}),
	}
	go s.loop()
	return s
}

// setHandler sets the func that receives the session's decoded events, in
// order, on the session's own goroutine; events that arrived before are
// delivered first. fn may call commands (their replies do not go through
// the event queue) but should not block for long.
func (s *cdpSession) setHandler(fn func(ev any)) {
	s.mu.Lock()
	s.handler = fn
	s.mu.Unlock()
	s.poke()
}

func (s *cdpSession) push(msg *cdproto.Message) {
	s.mu.Lock()
	s.queue = append(s.queue, msg)
	s.pushed++
	s.mu.Unlock()
	s.poke()
}

func (s *cdpSession) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *cdpSession) detach() {
	s.once.Do(func() { close(s.detached) })
}

func (s *cdpSession) loop() {
	for {
		s.mu.Lock()
		h := s.handler
		var q []*cdproto.Message
		if h != nil {
			q = s.queue
			s.queue = nil
		}
		s.mu.Unlock()
		for _, msg := range q {
			ev, err := cdproto.UnmarshalMessage(msg, chromedp.DefaultUnmarshalOptions)
			if err != nil {
				continue // an event this cdproto does not know
			}
			h(ev)
		}
		if len(q) > 0 {
			s.mu.Lock()
			s.handled += uint64(len(q))
			close(s.progress)
			s.progress = make(chan struct{})
			s.mu.Unlock()
			continue
		}
		select {
		case <-s.wake:
		case <-s.detached:
			// Deliver what is left (the detach event itself included).
			s.mu.Lock()
			h, q = s.handler, s.queue
			s.queue = nil
			s.mu.Unlock()
			if h != nil {
				for _, msg := range q {
					if ev, err := cdproto.UnmarshalMessage(msg, chromedp.DefaultUnmarshalOptions); err == nil {
						h(ev)
					}
				}
			}
			return
		}
	}
}

// sync returns once the session's handler has run for every event the
// browser sent before the reply to a command issued now. Replies bypass the
// event queue, so without it state derived from events (documents, epochs)
// can lag behind a command that already answered. It must not be called
// from the session's own handler.
func (s *cdpSession) sync(ctx context.Context) error {
	// Any cheap command works: the browser answers it after the events it
	// emitted before, and the reader queues those before it delivers the reply.
	if err := s.Call(ctx, target.GetTargetInfo.Method, nil, nil); err != nil {
		return err
	}
	return s.drain(ctx)
}

// drain returns once the session's handler has run for every event read so
// far: right after a reply on this session, every event the browser sent
// before it (sync without the extra round trip).
func (s *cdpSession) drain(ctx context.Context) error {
	s.mu.Lock()
	mark := s.pushed
	s.mu.Unlock()
	for {
		s.mu.Lock()
		done, ch := s.handler == nil || s.handled >= mark, s.progress
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-s.detached:
			return errDetached
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// future is a command whose reply has not been read yet.
type future struct {
	s   *cdpSession
	id  int64
	ch  chan *cdproto.Message
	err error
}

// send writes a command and returns without waiting for the reply.
func (s *cdpSession) send(ctx context.Context, method string, params any) *future {
	f := &future{s: s}
	var buf []byte
	if params != nil {
		var err error
		if buf, err = jsonv2.Marshal(params, chromedp.DefaultMarshalOptions); err != nil {
			f.err = fmt.Errorf("encoding %s: %w", method, err)
			return f
		}
	}
	c := s.c
	f.id = c.next.Add(1)
	f.ch = make(chan *cdproto.Message, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		f.err = errConnClosed
		return f
	}
	if s.id != "" {
		if _, ok := c.sessions[s.id]; !ok {
			c.mu.Unlock()
			f.err = errDetached
			return f
		}
	}
	c.pending[f.id] = &pendingCall{session: s.id, ch: f.ch, method: method}
	c.mu.Unlock()
	msg := &cdproto.Message{ID: f.id, SessionID: s.id, Method: cdproto.MethodType(method), Params: buf}
	if err := c.tr.Write(ctx, msg); err != nil {
		c.mu.Lock()
		delete(c.pending, f.id)
		c.mu.Unlock()
		f.err = fmt.Errorf("%s: %w: %w", method, errConnClosed, err)
	}
	return f
}

// wait reads the reply into res (nil to discard it).
func (f *future) wait(ctx context.Context, res any) error {
	if f.err != nil {
		return f.err
	}
	select {
	case msg, ok := <-f.ch:
		if !ok {
			select {
			case <-f.s.c.done:
				return errConnClosed
			default:
				return errDetached
			}
		}
		if msg.Error != nil {
			return msg.Error
		}
		if res != nil && len(msg.Result) > 0 {
			return jsonv2.Unmarshal(msg.Result, res, chromedp.DefaultUnmarshalOptions)
		}
		return nil
	case <-ctx.Done():
		f.s.c.mu.Lock()
		delete(f.s.c.pending, f.id)
		f.s.c.mu.Unlock()
		return ctx.Err()
	}
}

// Call satisfies cdp.Session.
func (s *cdpSession) Call(ctx context.Context, method string, params, res any) error {
	return s.send(ctx, method, params).wait(ctx, res)
}

// Subscribe satisfies cdp.Session; this package uses handlers instead.
func (s *cdpSession) Subscribe(string) (<-chan jsonv2.Value, func()) {
	ch := make(chan jsonv2.Value)
	close(ch)
	return ch, func() {}
}

// fire sends a command whose reply nobody waits for; a failure is logged at
// debug level (the usual cause is a target that went away).
func (s *cdpSession) fire(method string, params any) {
	var buf []byte
	if params != nil {
		var err error
		if buf, err = jsonv2.Marshal(params, chromedp.DefaultMarshalOptions); err != nil {
			s.c.log.Error("encoding a browser command", "method", method, "err", err)
			return
		}
	}
	c := s.c
	id := c.next.Add(1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.pending[id] = &pendingCall{session: s.id, method: method}
	c.mu.Unlock()
	msg := &cdproto.Message{ID: id, SessionID: s.id, Method: cdproto.MethodType(method), Params: buf}
	if err := c.tr.Write(context.Background(), msg); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		c.log.Debug("browser command not sent", "method", method, "err", err)
	}
}

// fireCmd is fire for a typed command.
func fireCmd[P, R any](s *cdpSession, c cdp.Command[P, R], params P) {
	s.fire(c.Method, params)
}

// call is cdp.Call with this package's session type.
func call[P, R any](ctx context.Context, s *cdpSession, c cdp.Command[P, R], params P) (R, error) {
	return cdp.Call(ctx, s, c, params)
}

// start is send for a typed command; wait on the result later.
func start[P, R any](ctx context.Context, s *cdpSession, c cdp.Command[P, R], params P) *future {
	return s.send(ctx, c.Method, params)
}

// waitAll waits for every future and returns the first error.
func waitAll(ctx context.Context, fs ...*future) error {
	var first error
	for _, f := range fs {
		if err := f.wait(ctx, nil); err != nil && first == nil {
			first = err
		}
	}
	return first
}
