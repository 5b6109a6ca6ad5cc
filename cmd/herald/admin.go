package main

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/otelherald/promtext"
	"github.com/heraldgo/herald/relay"
)

// adminServer serves /healthz, /readyz and /metrics on --admin-addr. The
// mux is where later admin pages (dead letters, pause) mount.
type adminServer struct {
	srv *http.Server
	ln  net.Listener
}

func startAdmin(addr string, db *sql.DB, wake *watchedWakeup, reader *sdkmetric.ManualReader, page http.Handler, log *slog.Logger) (*adminServer, error) {
	mux := http.NewServeMux()
	if page != nil {
		mux.Handle("/admin/", http.StripPrefix("/admin", page))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		var problems []string
		if err := db.PingContext(ctx); err != nil {
			problems = append(problems, "database: "+err.Error())
		}
		if wake != nil && !wake.up.Load() {
			problems = append(problems, "wakeup: not listening")
		}
		if len(problems) > 0 {
			http.Error(w, "not ready\n"+strings.Join(problems, "\n"), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", promtext.Handler(reader))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usagef("--admin-addr %q: %v", addr, err)
	}
	s := &adminServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln: ln}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("herald relay: admin server", slog.Any("error", err))
		}
	}()
	log.Info("herald relay: admin listening", slog.String("addr", ln.Addr().String()))
	return s, nil
}

// adminPage is the admin package's page and JSON API for the relay's
// table, behind HTTP Basic authentication (user and password compared in
// constant time); readOnly refuses every request that changes something.
func adminPage(db *sql.DB, r *relay.Relay, user, password string, readOnly bool, log *slog.Logger) (http.Handler, error) {
	a, err := admin.New(admin.Config{DB: db, Relay: r, Logger: log})
	if err != nil {
		return nil, err
	}
	h, err := admin.NewHandler(a, admin.HandlerConfig{Authorize: func(_ *http.Request, write bool) error {
		if write && readOnly {
			return errors.New("the admin page is read-only (--admin-read-only)")
		}
		return nil // authenticated below
	}})
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, p, ok := req.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="herald", charset="UTF-8"`)
			http.Error(w, "herald admin: authentication required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, req)
	}), nil
}

func (s *adminServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}
