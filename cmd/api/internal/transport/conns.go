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
// request of it is being answered: without a deadline of its own, an
// HTTP/2 connection that never opens a stream (or one that only ever sends
// requests without a token) lives for the idle timeout, and twenty
// thousand of them take the process's file descriptors from every tenant.
// On an open server every request is authenticated, so every connection
// that makes one is trusted.

// connStates tracks the connections of one server that are not trusted
// yet, by remote address (a TLS connection is reported to the hooks
// wrapped and unwrapped; its address is the same).
type connStates struct {
	deadline time.Duration
	conns    sync.Map // remote address → *connState
}

// connState is one connection's standing.
type connState struct {
	conn net.Conn // as accepted: closing it closes a TLS connection too
	// trusted is read without the lock by every request (set once, under
	// it): a trusted connection's requests take no lock.
	trusted atomic.Bool
	mu      sync.Mutex
	active  bool // a request of it is being answered
	expired bool // its deadline passed while untrusted
	timer   *time.Timer
}

type connStateKey struct{}

// connContext records a new connection and starts its deadline.
func (s *connStates) connContext(ctx context.Context, c net.Conn) context.Context {
	st := &connState{conn: c}
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
		closing := st.expired && !st.trusted.Load()
		st.mu.Unlock()
		if closing {
			st.conn.Close()
		}
	case http.StateClosed, http.StateHijacked:
		st.timer.Stop()
		s.conns.CompareAndDelete(addr, st)
	}
}

// expire closes the connection if it is still untrusted and answering
// nothing, or marks it for closing when it is.
func (st *connState) expire() {
	st.mu.Lock()
	st.expired = true
	closing := !st.trusted.Load() && !st.active
	st.mu.Unlock()
	if closing {
		st.conn.Close()
	}
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
