package sqltest

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Latency is the delay of a Slow proxy, each way; it may change at any
// time (bytes already on their way keep theirs).
type Latency struct{ d atomic.Int64 }

// Set makes every byte read from now on wait d before it is passed on.
func (l *Latency) Set(d time.Duration) { l.d.Store(int64(d)) }

func (l *Latency) get() time.Duration { return time.Duration(l.d.Load()) }

// Slow puts a TCP proxy in front of the host of the PostgreSQL URL dbURL
// that delays every byte by the returned Latency (none until Set) in each
// direction (a round trip costs twice that more), as a database far away
// or overloaded does, and returns dbURL through it. It models latency, not
// bandwidth: bytes keep their order and arrive the delay after they were
// sent. The proxy stops when the test ends.
func Slow(t testing.TB, dbURL string) (string, *Latency) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("sqltest: Slow: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sqltest: Slow: listen: %v", err)
	}
	p := &slowProxy{ln: ln, target: u.Host, delay: &Latency{}, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return u.String(), p.delay
}

type slowProxy struct {
	ln     net.Listener
	target string
	delay  *Latency

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func (p *slowProxy) accept() {
	defer p.wg.Done()
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
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(server, client)
		go p.pipe(client, server)
	}
}

// chunk is what one read returned and when it may be passed on.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk delay after it was read. Closing
// either side closes both.
func (p *slowProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	queue := make(chan chunk, 1024)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				queue <- chunk{b: buf[:n], due: time.Now().Add(p.delay.get())}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range queue {
		time.Sleep(time.Until(c.due))
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	for range queue { // let the reader finish
	}
}

func (p *slowProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
