package doccheck

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldgo/herald/delivery/amqp"
	"github.com/heraldgo/herald/delivery/kafka"
	"github.com/heraldgo/herald/delivery/nats"
	"github.com/heraldgo/herald/delivery/redisstream"
	"github.com/heraldgo/herald/delivery/webhook"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/wakeup/amqpfanout"
	"github.com/heraldgo/herald/wakeup/kafkasignal"
	"github.com/heraldgo/herald/wakeup/natssignal"
	"github.com/heraldgo/herald/wakeup/pgnotify"
	"github.com/heraldgo/herald/wakeup/redispubsub"
)

// Every delivery and wakeup package is built the same way: New(Config)
// returning (*T, error), what it connects to a field of Config (URL,
// ConnString, Brokers or Client), options of a client herald builds in
// ClientOptions, and one default dial timeout.
func TestConstructionConvention(t *testing.T) {
	t.Parallel()
	for name, fn := range map[string]any{
		"delivery/kafka": kafka.New, "delivery/redisstream": redisstream.New, "delivery/amqp": amqp.New, "delivery/webhook": webhook.New,
		"delivery/nats": nats.New, "wakeup/natssignal": natssignal.New,
		"wakeup/pgnotify": pgnotify.New, "wakeup/redispubsub": redispubsub.New, "wakeup/kafkasignal": kafkasignal.New, "wakeup/amqpfanout": amqpfanout.New,
	} {
		ft := reflect.TypeOf(fn)
		if ft.NumIn() != 1 || ft.In(0).Name() != "Config" || ft.In(0).Kind() != reflect.Struct {
			t.Errorf("%s.New is %s: want New(Config)", name, ft)
			continue
		}
		if ft.NumOut() != 2 || ft.Out(0).Kind() != reflect.Pointer || ft.Out(1) != reflect.TypeFor[error]() {
			t.Errorf("%s.New is %s: want it to return (*T, error)", name, ft)
		}
	}
	for name, cfg := range map[string]any{"delivery/kafka": kafka.Config{}, "wakeup/kafkasignal": kafkasignal.Config{}} {
		if _, ok := reflect.TypeOf(cfg).FieldByName("ClientOptions"); !ok {
			t.Errorf("%s.Config has no ClientOptions", name)
		}
	}
	for name, v := range map[string]time.Duration{
		"amqpfanout.DefaultDialTimeout": amqpfanout.DefaultDialTimeout,
		"nats.DefaultDialTimeout":       nats.DefaultDialTimeout,
		"natssignal.DefaultDialTimeout": natssignal.DefaultDialTimeout,
	} {
		if v != amqp.DefaultDialTimeout {
			t.Errorf("%s %s, amqp.DefaultDialTimeout %s: want one default", name, v, amqp.DefaultDialTimeout)
		}
	}
}

// A wakeup's New names the Config field at fault: nothing to connect to,
// or two things.
func TestWakeupConfigErrors(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for want, newFn := range map[string]func() error{
		"pgnotify.Config.ConnString": func() error { _, err := pgnotify.New(pgnotify.Config{}); return err },
		"redispubsub.Config.URL":     func() error { _, err := redispubsub.New(redispubsub.Config{}); return err },
		"redispubsub.Config.Client": func() error {
			_, err := redispubsub.New(redispubsub.Config{URL: "redis://127.0.0.1:1", Client: rdb})
			return err
		},
		"kafkasignal.Config.Brokers": func() error { _, err := kafkasignal.New(kafkasignal.Config{}); return err },
		"amqpfanout.Config.URL":      func() error { _, err := amqpfanout.New(amqpfanout.Config{}); return err },
		"natssignal.Config.URL":      func() error { _, err := natssignal.New(natssignal.Config{}); return err },
	} {
		if err := newFn(); !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: want ErrConfiguration naming %s", err, want)
		}
	}
	// The deprecated form still works.
	w, err := redispubsub.NewURL("redis://127.0.0.1:1", redispubsub.Config{})
	if err != nil {
		t.Fatalf("NewURL: %v", err)
	}
	_ = w.Close()
}
