package envelope

import "strings"

// SetMaxArrayRows makes WriteCapturedArrays split its INSERTs every n
// events, so that a test can make several chunks cheaply.
func SetMaxArrayRows(w *Writer, n int) { w.maxArrayRows = n }

// SkipMySQLKeyLocks makes a MySQL writer insert without locking its keys'
// bucket rows: what TestMySQLSharedKeyCommitOrder must see fail.
func SkipMySQLKeyLocks(w *Writer) { w.noKeyLocks = true }

// MySQLKeyBucket is the key-lock bucket of an ordering key on MySQL.
func MySQLKeyBucket(key string) int { return mysqlKeyBucket(key) }

// Migrations returns every version of the outbox table's schema, rendered.
var Migrations = migrations

// DDL is the Up statements of every version, in order.
func DDL(d Dialect, table string) ([]string, error) {
	ms, err := migrations(d, table)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Up...)
	}
	return out, nil
}

// DDLText returns DDL as one SQL script.
func DDLText(d Dialect, table string) (string, error) {
	stmts, err := DDL(d, table)
	if err != nil {
		return "", err
	}
	return strings.Join(stmts, ";\n\n") + ";\n", nil
}

// MySQLReadBack is the statement that reads back a MySQL chunk's sequences.
var MySQLReadBack = mysqlReadBack
