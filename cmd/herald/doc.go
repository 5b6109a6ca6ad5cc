// Command herald operates a herald outbox: it creates and migrates the
// table, reports its backlog, and runs a relay as a ready process, with no
// Go code of the user's.
//
//	go install github.com/heraldgo/herald/cmd/herald@latest
//
//	herald migrate up     --dsn "$DATABASE_URL"   # create the table or bring it to the latest version
//	herald migrate status --dsn app.db            # "version N (latest M)"
//	herald backlog --json --dsn "$DATABASE_URL"   # pending, oldest pending age, dead letters by topic
//	herald relay --dsn "$DATABASE_URL" --kafka-brokers kafka:9092 --wakeup pgnotify --admin-addr :9090
//
// # Commands
//
//	herald migrate up|down|status|print [flags]
//	herald backlog [flags]
//	herald relay [flags]
//	herald help [command]
//
// migrate up migrates the table to --version (default the latest); migrate
// down to --version (default one below the current); migrate status prints
// "version N (latest M)"; migrate print writes the SQL of every version
// (or of --version; its down script with --down) for goose, atlas or
// golang-migrate, with the dialect from --dialect or --dsn. The older
// command herald-migrate does the same with its own flags and keeps
// working.
//
// backlog prints, for each topic holding pending or dead-lettered events,
// how many are pending, the age of the oldest pending one (by the
// database's clock) and how many are dead-lettered: a table, or with
// --json an array of {"topic", "pending", "oldest_pending_age_seconds",
// "dead_lettered"}. It reads them in one statement (relay.BacklogByTopic).
//
// relay runs a relay until SIGTERM or SIGINT, then stops it gracefully: no
// new poll starts, the batch in hand is delivered and marked, and after
// --stop-timeout its deliveries are cancelled (their events released for
// the next relay); it exits 0 after a graceful stop.
//
// # Configuration: flags and environment
//
// Every flag --x-y can also be given as the environment variable
// HERALD_X_Y (HERALD_DSN, HERALD_BATCH_SIZE, HERALD_KAFKA_BROKERS, …);
// a flag on the command line wins over its variable. List flags (--topics,
// --route, --kafka-brokers, …) take comma-separated values, and may be
// repeated on the command line.
//
// A mistake in the command line — an unknown command or flag, a value that
// does not parse, a delivery or wakeup that lacks what it needs, a relay
// setting out of range — is reported naming the flag (or variable) and
// exits with status 2 before anything is connected. A missing outbox table
// (or column) is a configuration error too, found once the database
// answers: exit 2. Other failures exit 1.
//
// The database, for every command:
//
//	--dsn     HERALD_DSN     PostgreSQL URL (postgres://, postgresql://) or key=value string
//	                         (host=… dbname=…): PostgreSQL through pgx; anything else is a
//	                         SQLite file path or file: URI (modernc.org/sqlite, pure Go)
//	--table   HERALD_TABLE   outbox table, schema.table on PostgreSQL (default herald_outbox)
//
// backlog also takes --json, --topics and --exclude-topics; migrate takes
// --version, --down (print) and --dialect (print).
//
// The relay (relay.Config; 0 = the relay package's default):
//
//	--name                  HERALD_NAME                  name in leased_by and logs (default host:pid:random)
//	--topics                HERALD_TOPICS                only these topics: names or prefix patterns ("billing.*")
//	--exclude-topics        HERALD_EXCLUDE_TOPICS        leave these topics to other relays
//	--batch-size            HERALD_BATCH_SIZE            events one poll leases (1..10000, default 100)
//	--concurrency           HERALD_CONCURRENCY           events of a batch delivered at once (default 10)
//	--max-attempts          HERALD_MAX_ATTEMPTS          failures that dead-letter an event (default 5)
//	--retry-base            HERALD_RETRY_BASE            wait after the first failure, doubling (default 1s)
//	--retry-max             HERALD_RETRY_MAX             longest wait between attempts (default 5m)
//	--lease                 HERALD_LEASE                 how long a leased batch is the relay's (default 60s)
//	--delivery-timeout      HERALD_DELIVERY_TIMEOUT      bound of one delivery (default 30s; below --lease)
//	--min-poll-interval     HERALD_MIN_POLL_INTERVAL     wait after the first poll that did not fill a batch (250ms)
//	--max-poll-interval     HERALD_MAX_POLL_INTERVAL     longest wait between polls (5s; 1m with a wakeup)
//	--retain-published      HERALD_RETAIN_PUBLISHED      delete published events older than this (default keep)
//	--retain-dead-lettered  HERALD_RETAIN_DEAD_LETTERED  delete dead letters older than this (default keep)
//	--delete-on-publish     HERALD_DELETE_ON_PUBLISH     delete each event when delivered
//	--stop-timeout          HERALD_STOP_TIMEOUT          bound of the graceful stop (default 30s)
//	--log-level             HERALD_LOG_LEVEL             debug, info, warn or error (logs go to stderr)
//
// Deliveries — at least one; each has a name that routes refer to:
//
//	--kafka-brokers           HERALD_KAFKA_BROKERS           "kafka": delivery/kafka to these seed brokers
//	--kafka-topic             HERALD_KAFKA_TOPIC             the topic of every event (default its aggregate)
//	--redis-url               HERALD_REDIS_URL               "redis": delivery/redisstream, redis://host:port/db
//	--redis-stream            HERALD_REDIS_STREAM            the stream of every event (default its aggregate)
//	--amqp-url                HERALD_AMQP_URL                "amqp": delivery/amqp, amqp://user:pass@host/vhost
//	--amqp-exchange           HERALD_AMQP_EXCHANGE           the (existing) exchange to publish to
//	--webhook-url             HERALD_WEBHOOK_URL             "webhook": delivery/webhook, POST to this URL
//	--webhook-secret          HERALD_WEBHOOK_SECRET          sign each request with this secret
//	--webhook-allow-networks  HERALD_WEBHOOK_ALLOW_NETWORKS  CIDRs the SSRF guard lets through (loopback, private)
//	--route                   HERALD_ROUTE                   pattern=name, e.g. 'billing.*=webhook'
//
// With one delivery and no --route, every event goes to it. With several,
// --route is required: routes are tried in the order given (exact topics
// first, then prefix patterns, as delivery.RouterOf), and '*=name' takes
// the rest; an event no route takes is dead-lettered at its first attempt,
// its last_error naming the topic.
//
// The wakeup, which lets the relay poll rarely and still deliver at once:
//
//	--wakeup          HERALD_WAKEUP          pgnotify (PostgreSQL LISTEN), redis (pub/sub), kafka (a signal
//	                                         topic), amqp (a fanout exchange), or none (the default)
//	--wakeup-url      HERALD_WAKEUP_URL      what it connects to: PostgreSQL DSN, redis:// or amqp:// URL,
//	                                         Kafka brokers (default --dsn, --redis-url, --amqp-url,
//	                                         --kafka-brokers: the delivery's own server)
//	--wakeup-channel  HERALD_WAKEUP_CHANNEL  its channel, topic or exchange (default the package's)
//
// Writers must signal the same wakeup (see the wakeup packages).
//
// # Admin endpoints
//
// With --admin-addr (HERALD_ADMIN_ADDR; host:port, :0 picks a port, logged
// as "herald relay: admin listening"), the relay serves:
//
//	GET /healthz   200 while the process runs
//	GET /readyz    200 when the database answers a ping (2 s) and, with a wakeup, its listener is
//	               subscribed; 503 with the reasons otherwise
//	GET /metrics   the relay's OpenTelemetry metrics (otelherald: deliveries, failures, dead letters,
//	               poll and lease durations, backlog by topic)
//	    /admin/    with --admin-password: the admin package's page and JSON API (dead letters,
//	               retry, discard, pause, resume) for the relay's table
//
// The admin page:
//
//	--admin-password   HERALD_ADMIN_PASSWORD   serve /admin/ behind HTTP Basic authentication with this password
//	--admin-user       HERALD_ADMIN_USER       its user name (default herald)
//	--admin-read-only  HERALD_ADMIN_READ_ONLY  refuse retry, discard, pause and resume (403)
//
// Without --admin-password there is no page: the admin handler has no
// authentication of its own, and serving repairs to whoever reaches the
// port is not a default. Put the port behind TLS (a proxy, a mesh) when it
// leaves the host: Basic authentication sends the password with every
// request.
//
// /metrics is a plain text rendering of an OTel SDK ManualReader's data,
// one line per point — name{attribute="value",…} value; histograms as
// name_count and name_sum — not the Prometheus exposition format: it is
// for looking and for simple scrapers. For Prometheus or OTLP, run the
// relay from Go with otelherald and the exporter of your choice.
//
// The wakeup check is the relay's own notion of listening: subscribed from
// the wakeup's first "subscribed" call until its Listen returns. The wakeup
// packages keep reconnecting inside Listen and expose no state for it, so
// a listening connection lost and being re-established still counts as up
// (the relay polls meanwhile, at its shorter interval without a wakeup).
package main
