package envelope

import (
	"errors"
	"strings"
)

// poolerHint turns the errors a connection pooler in transaction mode
// causes into an ErrConfiguration that says what to change, and returns
// any other error as it is.
//
// PgBouncer (and other poolers) in transaction pooling hand each
// transaction whichever server connection is free, so a statement that a
// driver prepared on one server connection is missing on the next
// ("prepared statement … does not exist", SQLSTATE 26000) or already
// there under the same name ("… already exists", 42P05). pgx prepares and
// caches every statement by default (default_query_exec_mode
// cache_statement); herald sends more statements than a plain GORM write,
// so it meets this sooner.
func poolerHint(err error) error {
	var st interface{ SQLState() string }
	if err == nil || !errors.As(err, &st) {
		return err
	}
	if c := st.SQLState(); (c != "26000" && c != "42P05") || !strings.Contains(err.Error(), "prepared statement") {
		return err
	}
	var e *Error
	if errors.As(err, &e) && e.Where == poolerWhere {
		return err // hinted already
	}
	return &Error{Kind: ErrConfiguration, Where: poolerWhere, Err: err,
		Msg: "a prepared statement is missing on, or already exists on, the server connection this transaction got, as behind PgBouncer in transaction pooling: " +
			"open the pool with default_query_exec_mode=exec (or simple_protocol, or cache_describe) in the pgx DSN, " +
			"or connect to PostgreSQL directly"}
}

const poolerWhere = "database connection"
