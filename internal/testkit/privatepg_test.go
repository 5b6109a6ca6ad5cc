package testkit

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// TestPrivatePostgresThroughProxy starts a private cluster, talks to it
// through a Proxy, cuts the connection, crashes and restarts the server,
// and checks each step is seen by a client.
func TestPrivatePostgresThroughProxy(t *testing.T) {
	pg := NewPrivatePostgres(t)
	px := NewProxy(t, pg.Addr())
	db, err := sql.Open("pgx", pg.DSN(px.Addr(), "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	px.Cut()
	if err := conn.PingContext(ctx); err == nil {
		t.Fatal("a ping on a cut connection succeeded")
	}
	_ = conn.Close()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("a new connection after the cut: %v", err)
	}
	px.SetDown(true)
	if err := db.PingContext(ctx); err == nil {
		t.Fatal("a ping through a proxy that is down succeeded")
	}
	px.SetDown(false)
	if err := pg.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err == nil {
		t.Fatal("a ping to a crashed server succeeded")
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, func() bool { return db.PingContext(ctx) == nil }, "the restarted server answers")
	if pg.Crashes() != 1 || px.Cuts() < 2 {
		t.Fatalf("crashes %d cuts %d", pg.Crashes(), px.Cuts())
	}
}
