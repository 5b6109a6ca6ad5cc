// Command herald operates a herald outbox: it creates and migrates the
// table, reports its backlog, lists, retries and discards dead letters,
// follows new events, pauses topics, and runs a relay as a ready process,
// with no Go code of the user's.
//
//	go install github.com/heraldgo/herald/cmd/herald@latest
//
//	herald migrate up     --dsn "$DATABASE_URL"   # create the table or bring it to the latest version
//	herald migrate status --dsn app.db            # "version N (latest M)"
//	herald backlog --json --dsn "$DATABASE_URL"   # pending, oldest pending age, dead letters by topic
//	herald dead list --topics 'billing.*' --since "24h ago"
//	herald dead retry --topics 'billing.*' --error 503   # shows what it will touch, asks
//	herald tail --topics 'shop.*'                 # follow new events
//	herald relay --dsn "$DATABASE_URL" --kafka-brokers kafka:9092 --wakeup pgnotify --admin-addr :9090
//
// # Commands
//
//	herald migrate up|down|status|print [flags]
//	herald backlog [flags]
//	herald dead list|show ID|retry [ID…]|discard [ID…] [flags]
//	herald events list|show ID [flags]
//	herald tail [flags]
//	herald pause TOPIC [--reason R]
//	herald resume TOPIC
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
// backlog prints, for each topic holding pending or dead-lettered events
// or paused, how many are pending, the age of the oldest pending one (by
// the database's clock), how many are dead-lettered and whether it is
// paused: a table, or with --json an array of {"topic", "pending",
// "oldest_pending_age_seconds", "dead_lettered", "paused"}. It reads them
// in one statement (relay.BacklogByTopic). --by-tenant prints one row per
// tenant instead (relay.BacklogByTenant; JSON {"tenant", "pending",
// "oldest_pending_age_seconds", "dead_lettered"}, the events without a
// tenant as "" or "-"); --tenant a,b counts only those tenants' events.
// Wherever --tenant is taken, an empty name selects the events without a
// tenant: --tenant "" for those alone, --tenant ,acme for those and
// acme's (an empty HERALD_TENANT is as unset).
//
// dead list and events list print a page of events (dead letters; events
// in any --state: all, pending, failed, dead) as a table, or with --json
// as {"events": […], "next": N}; --limit (50, at most 1000) and --after
// (the next page's cursor, printed under a full page) page through them.
// Their filters, shared with retry and discard: --topics (names or
// "prefix.*" patterns), --key (an ordering key), --tenant (tenants,
// comma-separated: the outbox's tenant column), --since and --until (RFC
// 3339, "2006-01-02[ 15:04[:05]]" in UTC, "now" or "<duration> ago": "24h
// ago", "90m ago", "7d ago") and --error (text in last_error). dead show
// and events show print one event — state, tenant, attempts, last error,
// headers, payload — and the first events its ordering key holds back behind it;
// --json writes admin.Detail. Control characters in a table (an escape
// sequence in an error or a topic) are printed as U+FFFD.
//
// dead retry and dead discard take event ids, a filter or --all (one of
// them is required). They print what they will touch on stderr — the
// count, the filter, the first ten rows — and then, when stdin is a
// terminal, ask "Go ahead? [y/N]": any answer but y or yes does nothing
// and exits 1. When stdin is not a terminal they exit 2 unless --yes is
// given. --yes and --all are read from the command line only, never from
// HERALD_YES or HERALD_ALL. They work in batches of --batch-size (1000,
// at most 100000), each committed on its own, printing "retried N of M
// (P%)" on stderr after each; SIGINT or SIGTERM rolls back the batch in
// hand and exits 130, and the same command run again continues with what
// is still dead. The result goes to stdout ("retried N dead letter(s) in
// T", or with --json {"matched": M, "retried": N}).
//
// tail prints the events written after it starts (or after --from SEQ),
// one line each (--json: one object a line), reading the table every
// --interval (1s), until SIGINT or SIGTERM (exit 0). It follows by
// sequence: an event whose transaction commits after a later-numbered one
// has been printed is not printed. --topics, --key and --tenant narrow
// it; an event's tenant is shown as tenant=….
//
// pause TOPIC records the topic in the table of paused topics: every
// relay of the table leases none of its events from its next poll;
// resume TOPIC deletes the record (and says when the topic was not
// paused). The topic is an exact name, not a pattern.
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
// backlog also takes --json, --topics, --exclude-topics, --tenant and
// --by-tenant; migrate takes
// --version, --down (print) and --dialect (print).
//
// The relay (relay.Config; 0 = the relay package's default):
//
//	--name                  HERALD_NAME                  name in leased_by and logs (default host:pid:random)
//	--topics                HERALD_TOPICS                only these topics: names or prefix patterns ("billing.*")
//	--exclude-topics        HERALD_EXCLUDE_TOPICS        leave these topics to other relays
//	--tenant                HERALD_TENANT                only these tenants' events (relay.Config.Tenants)
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
//	GET /metrics   the relay's OpenTelemetry metrics in Prometheus text format (otelherald: deliveries,
//	               failures, dead letters, poll and lease durations, backlog and paused topics by topic)
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
// /metrics is the Prometheus text exposition format 0.0.4, written by
// otelherald/promtext from an OTel SDK ManualReader: names as
// OpenTelemetry maps them to Prometheus (herald_delivery_delay_seconds,
// messaging_client_sent_messages_total, herald_backlog_pending, …;
// histograms as cumulative _bucket series, _sum and _count). The
// repository's docs/prometheus holds a scrape configuration and alert
// rules. The process records no spans (it has no exporter); for OTLP, run
// the relay from Go with otelherald and the exporter of your choice.
//
// The wakeup check is the relay's own notion of listening: subscribed from
// the wakeup's first "subscribed" call until its Listen returns. The wakeup
// packages keep reconnecting inside Listen and expose no state for it, so
// a listening connection lost and being re-established still counts as up
// (the relay polls meanwhile, at its shorter interval without a wakeup).
package main
