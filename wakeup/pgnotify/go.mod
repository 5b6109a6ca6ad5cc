module github.com/heraldgo/herald/wakeup/pgnotify

go 1.26.0

require (
	github.com/heraldgo/herald v0.0.0-00010101000000-000000000000
	github.com/jackc/pgx/v5 v5.13.0
	gorm.io/driver/postgres v1.6.3
	gorm.io/gorm v1.31.2
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/go-sql-driver/mysql v1.11.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

// The modules of this repository, from this checkout (local development;
// a release requires their tags instead: RELEASING.md).
replace github.com/heraldgo/herald => ../..
