package relay

import (
	"errors"

	"github.com/heraldgo/herald/envelope"
	"regexp"
	"strings"
)

// sqlState returns the SQLSTATE of a PostgreSQL error (pgx's *PgError and
// lib/pq's *Error have a SQLState method; a driver that only prints it
// writes "(SQLSTATE xxxxx)"), or "".
func sqlState(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	if m := sqlStateRE.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return ""
}

var sqlStateRE = regexp.MustCompile(`\(SQLSTATE ([0-9A-Z]{5})\)`)

// isMissing reports whether err says a table, schema or column is missing
// or may not be read: an answer about the table, not about the
// connection.
func isMissing(err error) bool {
	switch sqlState(err) {
	case "42P01", "42703", "3F000", "42501": // undefined table / column, invalid schema, insufficient privilege
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "no such table") || strings.Contains(msg, "no such column")
}

// refusal returns an envelope.ErrConfiguration error when err, a failed
// connection, is an answer that waiting will not change: the DSN does not
// parse (pgx's "cannot parse", lib/pq's sslmode and key=value errors), the
// database does not exist (SQLSTATE 3D000), the password is wrong
// (28P01) or the login is refused (28000: no such role, no pg_hba.conf
// entry), or SQLite cannot open its file. Any other failure — a refused
// or timed-out TCP connection, a server starting up or shutting down — is
// the database being down, and nil is returned.
func refusal(err error) error {
	var what string
	switch sqlState(err) {
	case "3D000":
		what = "the database does not exist"
	case "28P01":
		what = "the password is wrong"
	case "28000":
		what = "the server refuses the login (no such role, or no pg_hba.conf entry for it)"
	}
	msg := err.Error()
	switch {
	case what != "":
	case strings.Contains(msg, "cannot parse `"), strings.Contains(msg, "pq: unsupported sslmode"),
		strings.Contains(msg, `missing "=" after`), strings.Contains(msg, "unknown port"), strings.Contains(msg, "invalid port"):
		what = "the data source name does not parse"
	case strings.Contains(msg, "unable to open database file"):
		what = "SQLite cannot open the database file"
	default:
		return nil
	}
	return &envelope.Error{Kind: envelope.ErrConfiguration, Where: "relay database",
		Msg: what + ": fix the DSN or the server's accounts; the relay does not retry a refusal", Err: err}
}

// isClosedDB reports whether err is database/sql's error for a closed
// *sql.DB, which it does not export.
func isClosedDB(err error) bool {
	return err != nil && strings.Contains(err.Error(), "sql: database is closed")
}

// poolerHint says what to change when err is PostgreSQL's "prepared
// statement does not exist" (26000) or "already exists" (42P05): a
// connection pooler in transaction mode (PgBouncer pool_mode=transaction)
// hands a connection's statements to another server connection, which
// breaks pgx's default statement cache. It returns "" for other errors.
func poolerHint(err error) string {
	if err == nil {
		return ""
	}
	switch sqlState(err) {
	case "26000", "42P05":
		return "; a prepared statement was lost or duplicated between client and server, as a pooler in transaction mode (PgBouncer pool_mode=transaction) does to pgx's statement cache: " +
			"open the database with default_query_exec_mode=exec (or simple_protocol) in the pgx DSN, " +
			"postgres://…?default_query_exec_mode=exec, or binary_parameters=yes with lib/pq, or pool in session mode"
	}
	return ""
}
