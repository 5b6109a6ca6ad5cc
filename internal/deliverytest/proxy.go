package deliverytest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy to one address that a test can cut: the way the
// suite takes a broker or an endpoint "down" without touching the server
// behind it (the machine's servers are shared and never stopped).
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]net.Conn // client side -> server side
	wg    sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards every connection
// to target. It is closed when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("deliverytest: proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]net.Conn{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection through the proxy and refuses new ones
// (accepted, then closed at once) until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c, s := range p.conns {
		_ = c.Close()
		_ = s.Close()
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// Conns is the number of client connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refused := p.cut
		p.mu.Unlock()
		if refused {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut { // cut while dialling
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			continue
		}
		p.conns[c] = s
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(c, s) })
	}
}

// pipe copies both ways until either side ends, then closes both.
func (p *Proxy) pipe(c, s net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // ends with the connection: no error worth keeping
		_ = dst.Close()
		done <- struct{}{}
	}
	go cp(s, c)
	go cp(c, s)
	<-done
	_ = c.Close()
	_ = s.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
