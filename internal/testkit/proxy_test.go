package testkit

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestProxyStall: a stalled proxy keeps the connection open and forwards
// nothing; once the stall ends what was held back arrives; a Cut during a
// stall closes the connection.
func TestProxyStall(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // echo
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	p := NewProxy(t, ln.Addr().String())
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo := func(b byte) {
		t.Helper()
		if _, err := c.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(within time.Duration) (byte, error) {
		_ = c.SetReadDeadline(time.Now().Add(within))
		var b [1]byte
		_, err := io.ReadFull(c, b[:])
		return b[0], err
	}
	echo('a')
	if b, err := read(10 * time.Second); err != nil || b != 'a' {
		t.Fatalf("before the stall: %q %v", b, err)
	}
	p.Stall(true)
	echo('b')
	if b, err := read(300 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled proxy forwarded %q (%v)", b, err)
	}
	p.Stall(false)
	if b, err := read(10 * time.Second); err != nil || b != 'b' {
		t.Fatalf("after the stall: %q %v", b, err)
	}
	p.Stall(true)
	p.Cut()
	if _, err := read(10 * time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a Cut while stalled did not close the connection: %v", err)
	}
	p.Stall(false)
}
