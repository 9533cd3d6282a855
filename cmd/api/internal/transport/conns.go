package transport

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A connection is trusted once it carries an authenticated request. Until
// then it is closed after the read timeout from its accept, once no
// request of it is being answered (a moment after its last answer, so that
// the answer is flushed first), and at the latest after the read and write
// timeouts more, answering or not: without a deadline of its own, an
// HTTP/2 connection that never opens a stream (or one that only ever sends
// requests without a token) lives for the idle timeout, and twenty
// thousand of them take the process's file descriptors from every tenant.
// On an open server every request is authenticated, so every connection
// that makes one is trusted.

// connStates tracks the connections of one server that are not trusted
// yet, by remote address (a TLS connection is reported to the hooks
// wrapped and unwrapped; its address is the same).
type connStates struct {
	deadline time.Duration // from the accept
	grace    time.Duration // more, for the requests in flight at the deadline
	conns    sync.Map      // remote address → *connState
}

// closeDelay is how long after its last answer an expired connection is
// closed: HTTP/2 reports a connection idle before its last frames are
// flushed.
const closeDelay = 100 * time.Millisecond

// connState is one connection's standing.
type connState struct {
	conn net.Conn // as accepted: closing it closes a TLS connection too
	// trusted is read without the lock by every request (set once, under
	// it): a trusted connection's requests take no lock.
	trusted atomic.Bool
	grace   time.Duration
	mu      sync.Mutex
	active  bool // a request of it is being answered
	expired bool // its deadline passed while untrusted
	timer   *time.Timer
}

type connStateKey struct{}

// connContext records a new connection and starts its deadline.
func (s *connStates) connContext(ctx context.Context, c net.Conn) context.Context {
	st := &connState{conn: c, grace: s.grace}
	st.timer = time.AfterFunc(s.deadline, st.expire)
	s.conns.Store(c.RemoteAddr().String(), st)
	return context.WithValue(ctx, connStateKey{}, st)
}

// connState follows a connection's requests, closing an expired untrusted
// one when its last request has been answered.
func (s *connStates) connState(c net.Conn, state http.ConnState) {
	addr := c.RemoteAddr().String()
	v, ok := s.conns.Load(addr)
	if !ok {
		return
	}
	st := v.(*connState)
	switch state {
	case http.StateActive:
		st.mu.Lock()
		st.active = true
		st.mu.Unlock()
	case http.StateIdle:
		st.mu.Lock()
		st.active = false
		if st.expired && !st.trusted.Load() {
			st.closeSoon()
		}
		st.mu.Unlock()
	case http.StateClosed, http.StateHijacked:
		st.timer.Stop()
		s.conns.CompareAndDelete(addr, st)
	}
}

// expire closes the connection if it is still untrusted: soon if it is
// answering nothing, else once it is, or when its grace ends (this is
// called again then), answering or not: a caller without a key cannot
// keep a connection by keeping a slow request on it.
func (st *connState) expire() {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.trusted.Load():
	case st.expired:
		st.conn.Close()
	case st.active:
		st.expired = true
		st.timer.Reset(st.grace)
	default:
		st.expired = true
		st.closeSoon()
	}
}

// closeSoon closes the connection after closeDelay unless it is trusted
// or answering by then. It is called with st.mu held.
func (st *connState) closeSoon() {
	time.AfterFunc(closeDelay, func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		if !st.trusted.Load() && !st.active {
			st.conn.Close()
		}
	})
}

// trustConn marks the connection of the request whose context is ctx
// trusted: it then lives by the idle timeout alone.
func trustConn(ctx context.Context) {
	st, ok := ctx.Value(connStateKey{}).(*connState)
	if !ok || st.trusted.Load() {
		return
	}
	st.mu.Lock()
	if !st.trusted.Load() {
		st.trusted.Store(true)
		st.timer.Stop()
	}
	st.mu.Unlock()
}
