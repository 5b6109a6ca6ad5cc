package entcapture_test

import (
	"bytes"
	"context"
	"testing"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	cc "github.com/heraldgo/herald/internal/capturecases"
)

// The entshapes users, tags and their plain many-to-many join table
// user_tags as GORM declares them.
type (
	gormUser struct {
		ID   int
		Name string
		Tags []gormTag `gorm:"many2many:user_tags;joinForeignKey:user_id;joinReferences:tag_id"`
	}
	gormTag struct {
		ID    int
		Label string
	}
)

func (gormUser) TableName() string { return "users" }
func (gormTag) TableName() string  { return "tags" }

// TestJoinRowsAsGORM: a join row of a plain many-to-many edge written or
// deleted through ent has the event gormcapture gives the same join row
// of GORM's many2many:user_tags relation: same topic, ordering key and
// payload bytes (occurred_at aside), in each payload mode (issue 18,
// defect 17).
func TestJoinRowsAsGORM(t *testing.T) {
	t.Parallel()
	for _, mode := range []envelope.PayloadMode{envelope.After, envelope.Keys, envelope.BeforeAndAfter} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			s := shapesEnv(t, envelope.SQLite, mode)
			gdb, err := gorm.Open(sqlite.Dialector{Conn: s.env.db}, &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
			must(t, err)
			must(t, gdb.Use(gormcapture.New(gormcapture.Config{CaptureAll: &envelope.Options{Payload: mode}})))
			ctx := context.Background()
			u := s.c.User.Create().SetName("u").SaveX(ctx)
			tg := s.c.Tag.Create().SetLabel("t").SaveX(ctx)
			take := func() event {
				t.Helper()
				evs := s.events(t)
				_, err := s.env.db.Exec(`DELETE FROM herald_outbox`)
				must(t, err)
				if len(evs) != 1 {
					t.Fatalf("want one event:\n%s", dump(evs))
				}
				evs[0].Payload = cc.ReplaceOccurredAt(evs[0].Payload, fixedAt)
				return evs[0]
			}
			same := func(what string, e, g event) {
				t.Helper()
				if e.Topic != g.Topic || e.OrderingKey != g.OrderingKey || !bytes.Equal(e.Payload, g.Payload) {
					t.Errorf("%s:\n ent  %s %s %s\n gorm %s %s %s", what, e.Topic, e.OrderingKey, e.Payload, g.Topic, g.OrderingKey, g.Payload)
				}
			}
			_, err = s.env.db.Exec(`DELETE FROM herald_outbox`)
			must(t, err)
			must(t, s.c.User.UpdateOne(u).AddTags(tg).Exec(ctx))
			entIns := take()
			must(t, s.c.User.UpdateOne(u).RemoveTags(tg).Exec(ctx))
			entDel := take()
			gu, gt := &gormUser{ID: u.ID}, &gormTag{ID: tg.ID}
			must(t, gdb.Model(gu).Omit("Tags.*").Association("Tags").Append(gt))
			same("insert", entIns, take())
			must(t, gdb.Model(gu).Association("Tags").Delete(gt))
			same("delete", entDel, take())
		})
	}
}
