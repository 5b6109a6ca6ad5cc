module github.com/heraldgo/herald/integration/entsuite

go 1.26.0

require (
	entgo.io/ent v0.14.5
	github.com/go-sql-driver/mysql v1.11.0
	github.com/heraldgo/herald v0.0.0
	github.com/lib/pq v1.12.3
	github.com/mattn/go-sqlite3 v1.14.22
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
)

replace github.com/heraldgo/herald => ../..
