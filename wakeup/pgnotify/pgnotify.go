package pgnotify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/wakehub"
	"github.com/heraldgo/herald/wakeup"
)

// DefaultChannel is the NOTIFY channel when Config.Channel is empty.
const DefaultChannel = "herald_wakeup"

// MaxPayload is the longest NOTIFY payload PostgreSQL accepts (its limit is
// 8000 bytes). A longer topic is signalled with an empty payload, which
// wakes every listening relay.
const MaxPayload = 7999

// Defaults of Config.
const (
	DefaultMinBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff    = 30 * time.Second
	DefaultPollWhileDown = time.Second
	DefaultProbeTimeout  = 5 * time.Second
	DefaultSignalTimeout = 5 * time.Second
	DefaultHealthCheck   = 10 * time.Second
)

// Config configures a Wakeup. The zero value of every field means its
// default.
type Config struct {
	// ConnString is the pgx connection string the Wakeup connects with (a
	// URL or key=value pairs) when it first listens or signals outside a
	// transaction. Required. The listening connection must reach
	// PostgreSQL directly or through a session-pooling proxy: LISTEN does
	// not work through a transaction-pooling one.
	ConnString string

	// Channel is the NOTIFY channel, the same for writers and relays of
	// one outbox; "" = DefaultChannel. At most 63 bytes (PostgreSQL's
	// identifier limit); it is quoted, so case and punctuation are kept.
	Channel string

	// Logger receives a WARN for each lost connection or failed reconnect,
	// an ERROR from the fifth failure in a row on, and an INFO when
	// listening again; nil = slog.Default().
	Logger *slog.Logger

	// MinBackoff and MaxBackoff bound the wait between reconnects of the
	// listening connection; it doubles after each failure in a row.
	MinBackoff, MaxBackoff time.Duration

	// PollWhileDown is how often listening relays are told to poll while
	// the listening connection is down; 0 = DefaultPollWhileDown.
	PollWhileDown time.Duration

	// ProbeTimeout is how long a new listening connection waits for a
	// NOTIFY sent from another connection before it decides it cannot
	// listen (a transaction-pooling proxy); 0 = DefaultProbeTimeout.
	ProbeTimeout time.Duration

	// SignalTimeout bounds one Signal sent outside a transaction;
	// 0 = DefaultSignalTimeout.
	SignalTimeout time.Duration

	// HealthCheck is how long the listening connection may stay silent
	// before it is pinged, and how long the ping may take: a server that
	// stopped answering while TCP stays up (a middlebox, a frozen host) is
	// found within twice HealthCheck and the connection reopened, the
	// relays polling meanwhile. It also bounds opening the connection
	// when the connection string sets no connect_timeout.
	// 0 = DefaultHealthCheck.
	HealthCheck time.Duration
}

// Wakeup is a PostgreSQL LISTEN/NOTIFY wakeup. Writers NOTIFY inside the
// events' transaction (SignalTx); relays listen on one connection per
// Wakeup value, shared by all of them. Create one per process and give it
// to both the capture plugin and the relays. Safe for concurrent use.
type Wakeup struct {
	connCfg   *pgx.ConnConfig
	signalCfg *pgx.ConnConfig // connCfg with synchronous_commit=off
	channel   string
	ident     string // the quoted channel, for LISTEN
	cfg       Config
	hub       *wakehub.Hub
	sender    *wakehub.Sender

	mu     sync.Mutex // guards conn: the Signal connection, used by the sender goroutine
	conn   *pgx.Conn
	closed bool
}

var (
	_ wakeup.Wakeup     = (*Wakeup)(nil)
	_ wakeup.TxSignaler = (*Wakeup)(nil)
)

// New checks cfg and returns a Wakeup that connects with cfg.ConnString
// when it first listens or signals outside a transaction.
func New(cfg Config) (*Wakeup, error) {
	if cfg.ConnString == "" {
		return nil, outbox.Configurationf("pgnotify.Config.ConnString", "empty; give the PostgreSQL connection string (a URL or key=value pairs)")
	}
	connCfg, err := pgx.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, outbox.Configurationf("pgnotify.Config.ConnString", "%v", err)
	}
	if _, ok := connCfg.RuntimeParams["application_name"]; !ok {
		connCfg.RuntimeParams["application_name"] = "herald/wakeup/pgnotify"
	}
	if cfg.Channel == "" {
		cfg.Channel = DefaultChannel
	}
	if err := validChannel(cfg.Channel); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		return nil, outbox.Configurationf("pgnotify.Config.MaxBackoff", "%s is below MinBackoff %s", cfg.MaxBackoff, cfg.MinBackoff)
	}
	if cfg.PollWhileDown <= 0 {
		cfg.PollWhileDown = DefaultPollWhileDown
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	if cfg.SignalTimeout <= 0 {
		cfg.SignalTimeout = DefaultSignalTimeout
	}
	if cfg.HealthCheck <= 0 {
		cfg.HealthCheck = DefaultHealthCheck
	}
	if connCfg.ConnectTimeout <= 0 {
		connCfg.ConnectTimeout = cfg.HealthCheck
	}
	// The Signal connection commits without waiting for the WAL flush: a
	// NOTIFY lost in a server crash costs a poll, and the notify lock
	// (see AfterCommit) is held only for a moment.
	signalCfg := connCfg.Copy()
	signalCfg.RuntimeParams["synchronous_commit"] = "off"
	w := &Wakeup{
		signalCfg: signalCfg,
		connCfg:   connCfg,
		channel:   cfg.Channel,
		ident:     pgx.Identifier{cfg.Channel}.Sanitize(),
		cfg:       cfg,
	}
	opt := wakehub.Options{
		Name: "herald/wakeup/pgnotify", Logger: cfg.Logger,
		MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff, PollWhileDown: cfg.PollWhileDown,
	}
	w.hub = wakehub.New(w.session, opt)
	w.sender = wakehub.NewSender(w.publish, cfg.SignalTimeout, opt)
	return w, nil
}

func validChannel(ch string) error {
	switch {
	case len(ch) > 63:
		return outbox.Configurationf("pgnotify.Config.Channel", "%q is %d bytes; PostgreSQL channel names are at most 63", ch, len(ch))
	case strings.ContainsRune(ch, 0):
		return outbox.Configurationf("pgnotify.Config.Channel", "%q contains a NUL byte", ch)
	}
	return nil
}

// Channel returns the NOTIFY channel.
func (w *Wakeup) Channel() string { return w.channel }

// payload is what a topic is signalled as: its name, or "" (wake every
// relay) when it is longer than NOTIFY allows.
func payload(topic string) string {
	if len(topic) > MaxPayload {
		return ""
	}
	return topic
}

// notifySQL returns one statement that NOTIFYs each distinct topic once,
// with its arguments: SELECT pg_notify($1, $2), pg_notify($1, $3), ...
func (w *Wakeup) notifySQL(topics []string) (string, []any) {
	var seen wakeup.Topics
	for _, t := range topics {
		seen.Add(payload(t))
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	args := []any{w.channel}
	for i, p := range seen.List() {
		if i > 0 {
			b.WriteString(", ")
		}
		args = append(args, p)
		b.WriteString("pg_notify($1, $" + strconv.Itoa(len(args)) + ")")
	}
	return b.String(), args
}

// SignalTx NOTIFYs each topic once inside the transaction q belongs to:
// PostgreSQL delivers the notifications when it commits, and never when it
// rolls back (nor those of a savepoint rolled back to). The payload is the
// topic name only, never event data. q must be a PostgreSQL connection or
// transaction of any driver (pgx stdlib, lib/pq). The capture plugins call
// it; call it yourself only for events you write with envelope.Writer
// (see the example).
func (w *Wakeup) SignalTx(ctx context.Context, q envelope.Querier, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	s, args := w.notifySQL(topics)
	if _, err := q.ExecContext(ctx, s, args...); err != nil {
		return fmt.Errorf("herald/wakeup/pgnotify: NOTIFY %s: %w", w.channel, err)
	}
	return nil
}

// Signal NOTIFYs topics from a connection of its own, for events already
// committed (RetryDeadLettered, a write that did not go through SignalTx).
// It does not wait: topics signalled while a NOTIFY is in flight go out
// together in the next one.
func (w *Wakeup) Signal(_ context.Context, topics []string) error {
	return w.sender.Signal(topics)
}

// publish runs on the sender goroutine.
func (w *Wakeup) publish(ctx context.Context, topics []string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return wakeup.ErrClosed
	}
	if w.conn == nil {
		c, err := pgx.ConnectConfig(ctx, w.signalCfg.Copy())
		if err != nil {
			return err
		}
		w.conn = c
	}
	s, args := w.notifySQL(topics)
	if _, err := w.conn.Exec(ctx, s, args...); err != nil {
		_ = w.conn.Close(context.Background())
		w.conn = nil
		return err
	}
	return nil
}

// AfterCommit returns w as a Wakeup that is not a wakeup.TxSignaler:
// writers given it signal after their commit (Signal), from w's own
// connection, coalescing the topics of commits that happen while a NOTIFY
// is in flight. It shares w's listening connection; closing it closes w.
//
// Use it on the writer side when many transactions commit at once.
// PostgreSQL (15, where it was measured) takes one server-wide lock for a
// transaction that NOTIFYs and holds it through its commit, including the
// WAL flush, so notifying commits cannot share a flush (group commit) and
// run one at a time: at most about one per WAL flush time. On a
// disk that flushes in 9 ms, 8 concurrent writers commit 115 notifying
// transactions per second against 790 without NOTIFY (BENCHMARKS.md).
// After commit, writers never wait on that lock, and the one notifying
// transaction per burst commits without waiting for the flush. The cost:
// a signal lost when the process dies between a commit and its NOTIFY
// (the relays find the event by polling), and one more hop.
func (w *Wakeup) AfterCommit() wakeup.Wakeup { return afterCommit{w} }

type afterCommit struct{ w *Wakeup }

func (a afterCommit) CheckDialect(d envelope.Dialect) error { return a.w.CheckDialect(d) }

// CheckDialect refuses MySQL (wakeup.DialectChecker): MySQL and MariaDB
// have no NOTIFY, so their writers' transactions cannot signal through
// PostgreSQL; use wakeup.NewInProcess, wakeup/redispubsub,
// wakeup/kafkasignal or wakeup/amqpfanout there.
func (w *Wakeup) CheckDialect(d envelope.Dialect) error {
	if d == envelope.MySQL {
		return outbox.Configurationf("Wakeup", "pgnotify is PostgreSQL's LISTEN/NOTIFY and the database is MySQL, which has no NOTIFY: use wakeup.NewInProcess, redispubsub, kafkasignal or amqpfanout")
	}
	return nil
}

func (a afterCommit) Signal(ctx context.Context, topics []string) error {
	return a.w.Signal(ctx, topics)
}

func (a afterCommit) Listen(ctx context.Context, fn func([]string)) error {
	return a.w.Listen(ctx, fn)
}

func (a afterCommit) Close() error { return a.w.Close() }

// Listen calls fn with the topics of each NOTIFY on the channel until ctx
// ends; see wakeup.Wakeup. All Listen calls of w share one connection,
// opened by the first and closed when the last returns; silent for
// HealthCheck, it is pinged, and reopened if the ping fails. While it is down
// it reconnects with back-off and calls fn(nil) every PollWhileDown, so
// relays poll meanwhile. When the connection cannot LISTEN — a hot
// standby, a server without LISTEN, or a transaction-pooling proxy such as
// PgBouncer in pool_mode=transaction, found by a NOTIFY sent from another
// connection that never arrives — Listen returns an error matching
// envelope.ErrUnsupported, and a relay keeps polling.
func (w *Wakeup) Listen(ctx context.Context, fn func(topics []string)) error {
	return w.hub.Listen(ctx, fn)
}

// Close stops listening and closes the connections w opened; Listen calls
// running return, later calls to Signal and Listen return
// wakeup.ErrClosed. SignalTx keeps working: it uses the caller's
// transaction.
func (w *Wakeup) Close() error {
	w.hub.Close()
	w.sender.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.conn != nil {
		_ = w.conn.Close(context.Background())
		w.conn = nil
	}
	return nil
}

// probePrefix started the payload of the NOTIFY a listening connection
// of an earlier release sent itself on the shared channel; such payloads
// are never handed to listeners (a rolling upgrade may still send them).
// Probes now go to a channel of the connection's own.
const probePrefix = "\x01herald-probe:"

func unsupported(format string, args ...any) error {
	return &envelope.Error{Kind: envelope.ErrUnsupported, Where: "pgnotify.Listen", Msg: fmt.Sprintf(format, args...)}
}

// session is one listening connection.
func (w *Wakeup) session(ctx context.Context, ready func(), deliver func([]string)) error {
	conn, err := pgx.ConnectConfig(ctx, w.connCfg.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// The probe channel is the connection's own: a NOTIFY on it proves
	// that notifications from other sessions reach this connection
	// (through a transaction-pooling proxy LISTEN succeeds but nothing
	// ever arrives), and the shared channel carries topics only. Both
	// LISTENs go in one statement, one transaction: a pooler runs them on
	// one server connection.
	probeChannel := probeChannelName()
	lctx, cancel := context.WithTimeout(ctx, w.cfg.HealthCheck)
	_, err = conn.Exec(lctx, "LISTEN "+w.ident+"; LISTEN "+pgx.Identifier{probeChannel}.Sanitize())
	cancel()
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "0A000" || pgErr.Code == "25006") {
			return unsupported("this connection cannot LISTEN (SQLSTATE %s: %s); relays keep polling", pgErr.Code, pgErr.Message)
		}
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("LISTEN %s: %w", w.ident, err)
	}
	if err := w.probe(ctx, probeChannel); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, w.cfg.ProbeTimeout)
	for {
		n, err := conn.WaitForNotification(pctx)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, context.DeadlineExceeded) && !conn.PgConn().IsClosed() {
				return unsupported("a NOTIFY sent on channel %q from another connection did not arrive on the listening one within %s: "+
					"is the connection string pointing at a transaction-pooling proxy (PgBouncer pool_mode=transaction)? "+
					"Listen needs a direct or session-pooled connection; relays keep polling", probeChannel, w.cfg.ProbeTimeout)
			}
			return err
		}
		if n.Channel == probeChannel {
			break
		}
		w.handle(n, deliver)
	}
	cancel()
	// UNLISTEN the probe channel, then LISTEN on the shared one again (a
	// no-op), so that pg_stat_activity shows the listening backend's
	// query as LISTEN on the shared channel.
	for _, q := range []string{"UNLISTEN " + pgx.Identifier{probeChannel}.Sanitize(), "LISTEN " + w.ident} {
		uctx, cancel := context.WithTimeout(ctx, w.cfg.HealthCheck)
		_, err = conn.Exec(uctx, q)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	ready()
	for {
		// Silent for HealthCheck: ping. A server that stopped answering
		// while TCP stays up would otherwise never be noticed.
		hctx, cancel := context.WithTimeout(ctx, w.cfg.HealthCheck)
		n, err := conn.WaitForNotification(hctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if conn.PgConn().IsClosed() || !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			// The ping is LISTEN again: a no-op round trip that keeps
			// pg_stat_activity showing what the backend does.
			pctx, cancel := context.WithTimeout(ctx, w.cfg.HealthCheck)
			_, err := conn.Exec(pctx, "LISTEN "+w.ident)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("health check: no answer within %s: %w", w.cfg.HealthCheck, err)
			}
			continue
		}
		w.handle(n, deliver)
	}
}

func (w *Wakeup) handle(n *pgconn.Notification, deliver func([]string)) {
	switch {
	case n.Channel != w.channel, strings.HasPrefix(n.Payload, probePrefix):
	case n.Payload == "":
		deliver(nil) // a topic too long for NOTIFY: every relay polls
	default:
		deliver([]string{n.Payload})
	}
}

// probeChannelName is a fresh channel for one connection's probe.
func probeChannelName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "herald_probe_" + hex.EncodeToString(b)
}

// probe sends a NOTIFY on channel from a short connection of its own.
func (w *Wakeup) probe(ctx context.Context, channel string) error {
	c, err := pgx.ConnectConfig(ctx, w.connCfg.Copy())
	if err != nil {
		return fmt.Errorf("connect (probe): %w", err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	ectx, cancel := context.WithTimeout(ctx, w.cfg.HealthCheck)
	defer cancel()
	// The simple protocol: no prepared statement, which a pooler's
	// server connection may already hold under the same name.
	if _, err := c.Exec(ectx, "SELECT pg_notify($1, '')", pgx.QueryExecModeSimpleProtocol, channel); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("NOTIFY (probe): %w", err)
	}
	return nil
}
