module github.com/heraldgo/herald/integration

go 1.26.0

require (
	entgo.io/ent v0.14.5
	github.com/glebarez/sqlite v1.11.0
	github.com/go-sql-driver/mysql v1.11.0
	github.com/google/uuid v1.6.0
	github.com/heraldgo/herald v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/delivery/kafka v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/delivery/nats v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/delivery/redisstream v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/delivery/river v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/internal/kafkatest v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/wakeup/amqpfanout v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/wakeup/kafkasignal v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/wakeup/natssignal v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/wakeup/pgnotify v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/wakeup/redispubsub v0.0.0-00010101000000-000000000000
	github.com/jackc/pgx/v5 v5.13.0
	github.com/lib/pq v1.12.3
	github.com/mattn/go-sqlite3 v1.14.22
	github.com/nats-io/nats.go v1.56.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/riverqueue/river v0.51.2
	github.com/riverqueue/river/riverdriver/riverdatabasesql v0.51.2
	github.com/shopspring/decimal v1.6.0
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	go.uber.org/goleak v1.3.0
	gorm.io/driver/mysql v1.6.0
	gorm.io/driver/postgres v1.6.3
	gorm.io/driver/sqlite v1.6.0
	gorm.io/gorm v1.31.2
	gorm.io/plugin/dbresolver v1.6.2
	modernc.org/sqlite v1.38.2
)

require (
	ariga.io/atlas v0.32.1-0.20250325101103-175b25e1c1b9 // indirect
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/agext/levenshtein v1.2.3 // indirect
	github.com/apparentlymart/go-textseg/v15 v15.0.0 // indirect
	github.com/bmatcuk/doublestar v1.3.4 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/glebarez/go-sqlite v1.21.2 // indirect
	github.com/go-openapi/inflect v0.19.0 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/hashicorp/hcl/v2 v2.18.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/mitchellh/go-wordwrap v1.0.1 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/ncruces/go-strftime v0.1.9 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/rabbitmq/amqp091-go v1.16.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/riverqueue/river/riverdriver v0.51.2 // indirect
	github.com/riverqueue/river/riverdriver/riverpgxv5 v0.51.2 // indirect
	github.com/riverqueue/river/rivershared v0.51.2 // indirect
	github.com/riverqueue/river/rivertype v0.51.2 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.2.0 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	github.com/twmb/franz-go v1.22.3 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	github.com/zclconf/go-cty v1.14.4 // indirect
	github.com/zclconf/go-cty-yaml v1.1.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/exp v0.0.0-20250620022241-b7579e27df2b // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	modernc.org/libc v1.66.3 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.11.0 // indirect
)

// The modules of this repository, from this checkout (local development;
// a release requires their tags instead: RELEASING.md).
replace (
	github.com/heraldgo/herald => ..
	github.com/heraldgo/herald/delivery/amqp => ../delivery/amqp
	github.com/heraldgo/herald/delivery/kafka => ../delivery/kafka
	github.com/heraldgo/herald/delivery/nats => ../delivery/nats
	github.com/heraldgo/herald/delivery/redisstream => ../delivery/redisstream
	github.com/heraldgo/herald/delivery/river => ../delivery/river
	github.com/heraldgo/herald/internal/kafkatest => ../internal/kafkatest
	github.com/heraldgo/herald/otelherald => ../otelherald
	github.com/heraldgo/herald/wakeup/amqpfanout => ../wakeup/amqpfanout
	github.com/heraldgo/herald/wakeup/kafkasignal => ../wakeup/kafkasignal
	github.com/heraldgo/herald/wakeup/natssignal => ../wakeup/natssignal
	github.com/heraldgo/herald/wakeup/pgnotify => ../wakeup/pgnotify
	github.com/heraldgo/herald/wakeup/redispubsub => ../wakeup/redispubsub
)
