package relaybench

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync/atomic"

	"github.com/jackc/pgx/v5/stdlib"
)

// OpenCounting opens a pgx pool on dsn whose connections count the
// statements they run (QueryContext and ExecContext; the relay prepares
// nothing itself) in *n. herald
// cannot tell the wrapped driver's dialect from its type: give relays
// Config.Dialect.
func OpenCounting(dsn string, n *atomic.Int64) (*sql.DB, error) {
	c, err := stdlib.GetDefaultDriver().(driver.DriverContext).OpenConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(countingConnector{c, n}), nil
}

type countingConnector struct {
	driver.Connector
	n *atomic.Int64
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{conn.(*stdlib.Conn), c.n}, nil
}

// countingConn wraps pgx's connection, counting statements. It implements
// what database/sql looks for on pgx's connection, so nothing else
// changes.
type countingConn struct {
	*stdlib.Conn
	n *atomic.Int64
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.n.Add(1)
	return c.Conn.ExecContext(ctx, q, args)
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.n.Add(1)
	return c.Conn.QueryContext(ctx, q, args)
}
