module github.com/heraldgo/herald/integration/gormsuite

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.11.0
	github.com/google/uuid v1.6.0
	github.com/heraldgo/herald v0.0.0
	github.com/jackc/pgx/v5 v5.13.0
	github.com/jinzhu/now v1.1.5
	github.com/lib/pq v1.12.3
	github.com/stretchr/testify v1.11.1
	gorm.io/driver/gaussdb v0.1.0
	gorm.io/driver/mysql v1.6.0
	gorm.io/driver/postgres v1.6.3
	gorm.io/driver/sqlite v1.6.0
	gorm.io/driver/sqlserver v1.6.1
	gorm.io/gorm v1.31.2
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/HuaweiCloudDeveloper/gaussdb-go v1.0.0-rc1 // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/golang-sql/civil v0.0.0-20220223132316-b832511892a9 // indirect
	github.com/golang-sql/sqlexp v0.1.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/mattn/go-sqlite3 v1.14.32 // indirect
	github.com/microsoft/go-mssqldb v1.9.3 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/tjfoc/gmsm v1.4.1 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

replace github.com/heraldgo/herald => ../..
