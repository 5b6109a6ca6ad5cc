module github.com/heraldgo/herald/delivery/kafka

go 1.26.0

require (
	github.com/google/uuid v1.6.0
	github.com/heraldgo/herald v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/internal/kafkatest v0.0.0-00010101000000-000000000000
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/go-sql-driver/mysql v1.11.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.13.0 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

// The modules of this repository, from this checkout (local development;
// a release requires their tags instead: RELEASING.md).
replace (
	github.com/heraldgo/herald => ../..
	github.com/heraldgo/herald/internal/kafkatest => ../../internal/kafkatest
)
