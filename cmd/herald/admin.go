package main

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/heraldgo/herald/admin"
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
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(r.Context(), &rm); err != nil {
			http.Error(w, "collecting metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		writeMetrics(w, &rm)
	})
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

// writeMetrics renders the SDK's data as text, one line per point:
// name{attr="v",…} value — sums and gauges as their value, histograms as
// name_count and name_sum. It is a plain rendering of the OTel data, not
// the Prometheus exposition format.
func writeMetrics(w io.Writer, rm *metricdata.ResourceMetrics) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					fmt.Fprintf(w, "%s%s %d\n", m.Name, attrs(p.Attributes), p.Value)
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					fmt.Fprintf(w, "%s%s %g\n", m.Name, attrs(p.Attributes), p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					fmt.Fprintf(w, "%s%s %d\n", m.Name, attrs(p.Attributes), p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					fmt.Fprintf(w, "%s%s %g\n", m.Name, attrs(p.Attributes), p.Value)
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					fmt.Fprintf(w, "%s_count%s %d\n%s_sum%s %d\n", m.Name, attrs(p.Attributes), p.Count, m.Name, attrs(p.Attributes), p.Sum)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					fmt.Fprintf(w, "%s_count%s %d\n%s_sum%s %g\n", m.Name, attrs(p.Attributes), p.Count, m.Name, attrs(p.Attributes), p.Sum)
				}
			}
		}
	}
}

func attrs(s attribute.Set) string {
	if s.Len() == 0 {
		return ""
	}
	kv := s.ToSlice()
	sort.Slice(kv, func(i, j int) bool { return kv[i].Key < kv[j].Key })
	parts := make([]string, len(kv))
	for i, a := range kv {
		parts[i] = fmt.Sprintf("%s=%q", a.Key, a.Value.String())
	}
	return "{" + strings.Join(parts, ",") + "}"
}
