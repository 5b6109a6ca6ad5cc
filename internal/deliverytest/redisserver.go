package deliverytest

import (
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/testkit"
)

// RedisServer is a private redis-server on a port of its own, which a test
// may stop and start again (the machine's shared Redis is never stopped).
// Its data survives a restart (append-only file in t.TempDir()).
type RedisServer struct {
	Port int
	dir  string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// NewRedisServer starts a redis-server on a free port; it is stopped when
// the test ends. It fails the test when redis-server is not installed
// (.ci/run installs it).
func NewRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("deliverytest: redis-server is not installed (.ci/run installs it): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	s := &RedisServer{Port: port, dir: t.TempDir()}
	s.Start(t)
	t.Cleanup(func() { s.Stop(t) })
	return s
}

// Addr is the server's address.
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the server's redis:// URL.
func (s *RedisServer) URL() string { return "redis://" + s.Addr() + "/0" }

// Start starts the server (again) and waits until it accepts connections.
func (s *RedisServer) Start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", s.dir, "--logfile", "")
	if err := cmd.Start(); err != nil {
		t.Fatalf("deliverytest: start redis-server: %v", err)
	}
	s.cmd = cmd
	testkit.Eventually(t, 20*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}, "redis-server listening on %s", s.Addr())
}

// Stop kills the server and waits for it to exit.
func (s *RedisServer) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}
