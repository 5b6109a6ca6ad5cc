package testkit

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on the loopback interface that a test puts between
// a client and a server to cut connections: Cut closes every connection it
// carries, SetDown refuses (accepts and at once closes) new ones until
// SetDown(false). The shared servers of the machine are never touched; only
// the connections through the proxy are.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	down  bool
	cuts  int
	wg    sync.WaitGroup

	stall stall // SetStalled, SetBlackhole
}

// NewProxy starts a proxy to target ("host:port") and stops it when the
// test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit: proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.stall.cond = sync.NewCond(&p.stall.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port as a string.
func (p *Proxy) Port() string {
	_, port, _ := net.SplitHostPort(p.Addr())
	return port
}

// Cut closes every connection the proxy carries now; new ones are accepted
// unless the proxy is down.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		p.stall.cut(c)
	}
	p.cuts++
}

// SetDown makes the proxy refuse new connections (down) or accept them
// again; SetDown(true) also cuts the open ones.
//
// Down is set before the open connections are cut:
// a client that reconnects the moment its connection is cut is refused,
// never given a new connection that outlives the outage.
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.Cut()
	}
}

// Cuts is how many times Cut ran.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.stall.set(false, false, true)
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	p.stall.forget(c)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !p.track(c) {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(s) {
		_ = s.Close()
		return
	}
	defer p.untrack(s)
	defer s.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst net.Conn, src io.Reader) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.(*stalled).Conn.Close()
		done <- struct{}{}
	}
	go pipe(s, p.stall.reader(c, true))
	go pipe(c, p.stall.reader(s, false))
	<-done
	<-done
}

// Open is the number of connections open through the proxy, both sides
// counted: zero once every client closed its connections.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// SetStalled makes the proxy stop reading what clients send (stalled) or
// read it again: a server that stops reading, as RabbitMQ does under a
// memory or disk alarm. The connections stay open; once the socket
// buffers are full, a client's writes block. Answers still flow.
func (p *Proxy) SetStalled(stalled bool) { p.stall.set(stalled, false, false) }

// SetBlackhole makes the proxy carry nothing either way (on) or carry
// again (off), its connections left open: a dead link that TCP has not
// noticed.
func (p *Proxy) SetBlackhole(on bool) { p.stall.set(on, on, false) }

// stall holds the proxy's directions that stopped carrying.
type stall struct {
	mu         sync.Mutex
	cond       *sync.Cond
	up, down   bool // client to server, server to client
	closedDown bool
	cuts       map[net.Conn]bool // connections cut while a read of theirs may wait
}

// cut wakes the stalled reads of c, which was closed.
func (s *stall) cut(c net.Conn) {
	s.mu.Lock()
	if s.cuts == nil {
		s.cuts = map[net.Conn]bool{}
	}
	s.cuts[c] = true
	s.mu.Unlock()
	s.cond.Broadcast()
}

func (s *stall) forget(c net.Conn) {
	s.mu.Lock()
	delete(s.cuts, c)
	s.mu.Unlock()
}

func (s *stall) set(up, down, closed bool) {
	s.mu.Lock()
	s.up, s.down = up, down
	if closed {
		s.closedDown = true
	}
	s.mu.Unlock()
	s.cond.Broadcast()
}

// reader returns c, whose reads wait while its direction is stalled.
func (s *stall) reader(c net.Conn, up bool) *stalled { return &stalled{Conn: c, s: s, up: up} }

type stalled struct {
	net.Conn
	s  *stall
	up bool
}

// Read waits while the direction is stalled, before reading (so the
// proxy stops reading) and after (so what a read in progress got is held,
// not passed on).
func (r *stalled) Read(b []byte) (int, error) {
	r.wait()
	n, err := r.Conn.Read(b)
	r.wait()
	return n, err
}

func (r *stalled) wait() {
	r.s.mu.Lock()
	for !r.s.closedDown && !r.s.cuts[r.Conn] && ((r.up && r.s.up) || (!r.up && r.s.down)) {
		r.s.cond.Wait()
	}
	r.s.mu.Unlock()
}
