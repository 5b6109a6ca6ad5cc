package relay

import (
	"errors"
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
