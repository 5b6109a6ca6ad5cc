package testkit

import (
	"errors"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on the loopback interface that a test puts between
// a client and a server to cut connections: Cut closes every connection it
// carries, SetDown refuses (accepts and at once closes) new ones until
// SetDown(false), Stall stops forwarding while keeping them open. The shared servers of the machine are never touched; only
// the connections through the proxy are.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	down    bool
	cuts    int
	wg      sync.WaitGroup
	stalled bool
	resume  chan struct{} // closed when a stall ends
	cutSig  chan struct{} // closed (and replaced) by each Cut

	notReading bool          // StopReading: client-to-server bytes held back
	readResume chan struct{} // closed when StopReading(false) ends it
}

// NewProxy starts a proxy to target ("host:port") and stops it when the
// test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit: proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, cutSig: make(chan struct{})}
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
	}
	close(p.cutSig) // stalled copies end: their connections are closed
	p.cutSig = make(chan struct{})
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

// Stall makes the proxy stop forwarding bytes, in both directions, on
// every connection it carries and on new ones, while keeping them open:
// a peer behind a middlebox that keeps TCP up but passes nothing, found
// only by a health check. Stall(false) forwards again, what was held back
// included; Cut and SetDown still close the connections.
func (p *Proxy) Stall(stall bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case stall && !p.stalled:
		p.stalled, p.resume = true, make(chan struct{})
	case !stall && p.stalled:
		p.stalled = false
		close(p.resume)
	}
}

// StopReading makes the proxy stop reading what clients send (on), or
// read it again (off), on every connection and on new ones, while answers
// still flow: a server that stops reading, as RabbitMQ does under a memory
// or disk alarm. Once the socket buffers are full a client's writes block.
// Cut and SetDown still close the connections.
func (p *Proxy) StopReading(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && !p.notReading:
		p.notReading, p.readResume = true, make(chan struct{})
	case !on && p.notReading:
		p.notReading = false
		close(p.readResume)
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Stall(false)
	p.StopReading(false)
	p.Cut()
	p.wg.Wait()
}

// wait blocks while the proxy is stalled (or, for the bytes clients send,
// up, not reading), until that ends or a Cut.
func (p *Proxy) wait(up bool) {
	for {
		p.mu.Lock()
		resume, cut := p.resume, p.cutSig
		held := p.stalled
		if !held && up && p.notReading {
			held, resume = true, p.readResume
		}
		p.mu.Unlock()
		if !held {
			return
		}
		select {
		case <-resume:
		case <-cut:
			return
		}
	}
}

// copy forwards src to dst, holding each read back while the proxy is
// stalled.
func (p *Proxy) copy(dst, src net.Conn, up bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.wait(up)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
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
	pipe := func(dst, src net.Conn, up bool) {
		p.copy(dst, src, up)
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(s, c, true)
	go pipe(c, s, false)
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
