module github.com/heraldgo/herald/cmd/herald

go 1.26.0

require (
	github.com/google/uuid v1.6.0
	github.com/heraldgo/herald v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/admin v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/delivery/amqp v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/delivery/kafka v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/delivery/redisstream v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/internal/kafkatest v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/otelherald v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/wakeup/amqpfanout v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/wakeup/kafkasignal v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/wakeup/pgnotify v0.0.0-00010101000000-000000000000
	github.com/heraldgo/herald/wakeup/redispubsub v0.0.0-00010101000000-000000000000
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	go.opentelemetry.io/otel/sdk/metric v1.47.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/go-sql-driver/mysql v1.11.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.13.0 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/ncruces/go-strftime v0.1.9 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/sdk v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/exp v0.0.0-20250620022241-b7579e27df2b // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	modernc.org/libc v1.66.3 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.11.0 // indirect
	modernc.org/sqlite v1.38.2 // indirect
)

// The modules of this repository, from this checkout (local development;
// a release requires their tags instead: RELEASING.md).
replace (
	github.com/heraldgo/herald => ../..
	github.com/heraldgo/herald/admin => ../../admin
	github.com/heraldgo/herald/delivery/amqp => ../../delivery/amqp
	github.com/heraldgo/herald/delivery/kafka => ../../delivery/kafka
	github.com/heraldgo/herald/delivery/redisstream => ../../delivery/redisstream
	github.com/heraldgo/herald/internal/kafkatest => ../../internal/kafkatest
	github.com/heraldgo/herald/otelherald => ../../otelherald
	github.com/heraldgo/herald/wakeup/amqpfanout => ../../wakeup/amqpfanout
	github.com/heraldgo/herald/wakeup/kafkasignal => ../../wakeup/kafkasignal
	github.com/heraldgo/herald/wakeup/pgnotify => ../../wakeup/pgnotify
	github.com/heraldgo/herald/wakeup/redispubsub => ../../wakeup/redispubsub
)
