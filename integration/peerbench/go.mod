module github.com/heraldgo/herald/integration/peerbench

go 1.26.0

// The modules of this repository, from this checkout: the relay benchmark
// (integration/relaybench) is in the integration module, which needs the
// transports' modules.
replace (
	github.com/heraldgo/herald => ../..
	github.com/heraldgo/herald/admin => ../../admin
	github.com/heraldgo/herald/cmd/herald => ../../cmd/herald
	github.com/heraldgo/herald/delivery/amqp => ../../delivery/amqp
	github.com/heraldgo/herald/delivery/kafka => ../../delivery/kafka
	github.com/heraldgo/herald/delivery/nats => ../../delivery/nats
	github.com/heraldgo/herald/delivery/redisstream => ../../delivery/redisstream
	github.com/heraldgo/herald/delivery/river => ../../delivery/river
	github.com/heraldgo/herald/delivery/watermill => ../../delivery/watermill
	github.com/heraldgo/herald/examples/service => ../../examples/service
	github.com/heraldgo/herald/inbox/amqpinbox => ../../inbox/amqpinbox
	github.com/heraldgo/herald/inbox/kafkainbox => ../../inbox/kafkainbox
	github.com/heraldgo/herald/inbox/redisinbox => ../../inbox/redisinbox
	github.com/heraldgo/herald/integration => ..
	github.com/heraldgo/herald/internal/doccheck => ../../internal/doccheck
	github.com/heraldgo/herald/internal/kafkatest => ../../internal/kafkatest
	github.com/heraldgo/herald/otelherald => ../../otelherald
	github.com/heraldgo/herald/wakeup/amqpfanout => ../../wakeup/amqpfanout
	github.com/heraldgo/herald/wakeup/kafkasignal => ../../wakeup/kafkasignal
	github.com/heraldgo/herald/wakeup/natssignal => ../../wakeup/natssignal
	github.com/heraldgo/herald/wakeup/pgnotify => ../../wakeup/pgnotify
	github.com/heraldgo/herald/wakeup/redispubsub => ../../wakeup/redispubsub
)

require (
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/ThreeDotsLabs/watermill-sql/v4 v4.1.2
	github.com/google/uuid v1.6.0
	github.com/heraldgo/herald v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/integration v0.0.0-00010101000000-000000000000
	github.com/jackc/pgx/v5 v5.13.0
	github.com/riverqueue/river v0.51.2
	github.com/riverqueue/river/riverdriver/riverdatabasesql v0.51.2
	github.com/riverqueue/river/riverdriver/riverpgxv5 v0.51.2
	gorm.io/driver/postgres v1.6.3
	gorm.io/driver/sqlite v1.6.0
	gorm.io/gorm v1.31.2
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/go-sql-driver/mysql v1.11.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	github.com/lib/pq v1.12.3 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/mattn/go-sqlite3 v1.14.22 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/riverqueue/river/riverdriver v0.51.2 // indirect
	github.com/riverqueue/river/rivershared v0.51.2 // indirect
	github.com/riverqueue/river/rivertype v0.51.2 // indirect
	github.com/sony/gobreaker v1.0.0 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.2.0 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
