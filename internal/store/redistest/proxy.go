package redistest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a loopback port in front of a Redis, for fault
// tests: BlackHole makes it swallow every byte both ways and leave every
// connection hanging, as a network that silently drops packets does (the
// dial still succeeds; nothing ever answers). Restore forwards again.
// Delay holds every reply but a PONG back, as a Redis further away (or busier) would.
type Proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu     sync.Mutex
	holed  bool
	delay  time.Duration
	conns  map[*pipe]struct{}
	closed bool
	wg     sync.WaitGroup
}

// pipe is one proxied connection: the client's side and Redis's side.
type pipe struct {
	client, server net.Conn
	// held is set when the pipe lived through a black hole: bytes were
	// dropped, so the stream is corrupt and Restore closes it.
	held bool
}

// NewProxy starts a proxy to target (host:port) on a free loopback port;
// it stops when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{t: t, ln: ln, target: target, conns: map[*pipe]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is a redis:// URL that reaches Redis through the proxy.
func (p *Proxy) URL() string { return fmt.Sprintf("redis://%s/0", p.Addr()) }

// BlackHole stops forwarding: from now on bytes in either direction are
// dropped and new connections are accepted but never reach Redis.
func (p *Proxy) BlackHole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holed = true
	for c := range p.conns {
		c.held = true
	}
}

// Restore forwards again. Connections that lived through the black hole
// are closed (their streams lost bytes), as the peer's TCP stack would
// eventually reset them; clients dial afresh.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holed = false
	for c := range p.conns {
		if c.held {
			c.client.Close()
			c.server.Close()
			delete(p.conns, c)
		}
	}
}

// Delay holds back each chunk of Redis's replies by d before the client
// gets it (0: none), on every connection, open or to come: a round trip
// takes at least d. A lone PONG, the probe's ping, is not held back: the
// calls are slow and Redis is plainly alive, so a test of what is done
// with late replies does not also hang on whether a saturated host's probe
// pings in time.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.client.Close()
		c.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	c := &pipe{client: client}
	p.mu.Lock()
	holed, closed := p.holed, p.closed
	p.mu.Unlock()
	if closed {
		client.Close()
		return
	}
	if holed {
		// Accepted, never forwarded: swallow what the client writes until
		// the hole is restored (then close) or the client gives up.
		c.server = nopConn{}
		c.held = true
		p.track(c)
		_, _ = io.Copy(io.Discard, client)
		p.untrack(c)
		client.Close()
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil { // Redis is down: refuse, as Redis itself would
		client.Close()
		return
	}
	c.server = server
	if !p.track(c) {
		client.Close()
		server.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.copy(c, server, client, false); done <- struct{}{} }()
	go func() { p.copy(c, client, server, true); done <- struct{}{} }()
	<-done
	client.Close()
	server.Close()
	<-done
	p.untrack(c)
}

// copy forwards src to dst, dropping what it reads while the proxy is a
// black hole; replies (Redis's side to the client's) wait out the delay.
func (p *Proxy) copy(c *pipe, dst, src net.Conn, replies bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			holed, delay := p.holed, p.delay
			p.mu.Unlock()
			if replies && delay > 0 && string(buf[:n]) != "+PONG\r\n" {
				time.Sleep(delay)
			}
			if !holed {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) track(c *pipe) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c *pipe) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// nopConn stands in for the Redis side of a connection accepted while the
// proxy was a black hole.
type nopConn struct{ net.Conn }

func (nopConn) Close() error { return errors.New("not connected") }

// ProxyURL puts a Proxy in front of the host of rawURL (a PostgreSQL URL,
// say: the proxy only moves bytes) and returns rawURL through it, for the
// fault tests of any service the test reaches by URL.
func ProxyURL(t testing.TB, rawURL string) (string, *Proxy) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("ProxyURL: %v", err)
	}
	p := NewProxy(t, u.Host)
	u.Host = p.Addr()
	return u.String(), p
}
