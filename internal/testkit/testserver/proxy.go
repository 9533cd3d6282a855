package testserver

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a free loopback port in front of a server, with
// the faults of a network or a server in trouble that a test switches on:
// every message from a client held for a while before it is passed on (a
// database that answers each statement seconds late), or every connection
// dropped. It stops when the test ends.
type Proxy struct {
	// Addr is the proxy's address, host:port.
	Addr string

	target string
	ln     net.Listener
	delay  atomic.Int64 // ns
	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

// StartProxy starts a proxy in front of target (host:port).
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.Drop()
		p.wg.Wait()
	})
	return p
}

// SetDelay holds every message from a client for d before passing it on (0:
// none). It applies to the messages read from then on.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Drop closes every connection the proxy carries; new ones are accepted.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[server] = true, true
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(server, client, true) })
		p.wg.Go(func() { p.pipe(client, server, false) })
	}
}

// pipe copies from src to dst, holding each read for the delay if delayed,
// until either side closes; then it closes both.
func (p *Proxy) pipe(dst, src net.Conn, delayed bool) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
		dst.Close()
		src.Close()
	}()
	if !delayed {
		io.Copy(dst, src)
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			time.Sleep(time.Duration(p.delay.Load()))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
