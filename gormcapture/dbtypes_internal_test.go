package gormcapture

import (
	"database/sql"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
)

type dbTypesName string

// dbTypesJSON declares its GORM data type, as datatypes.JSON does.
type dbTypesJSON []byte

func (dbTypesJSON) GormDataType() string { return "json" }

// dbTypesModel has a field of each kind undeclared picks or leaves.
type dbTypesModel struct {
	ID      int64
	Str     string
	Ptr     *string
	Bytes   []byte
	Named   dbTypesName
	Raw     json.RawMessage
	Null    sql.NullString
	Tagged  string `gorm:"type:text"`
	JSONTyp dbTypesJSON
	Count   int
	Flag    bool
	At      time.Time
	Secret  string `herald:"sensitive"`
}

// undeclared lists the payload columns whose database type the plugin
// reads: text-like fields without a type: tag or a GormDataType, not the
// key, numbers, booleans or times, nor columns left out of events.
func TestUndeclared(t *testing.T) {
	t.Parallel()
	sch, err := schema.Parse(&dbTypesModel{}, &sync.Map{}, schema.NamingStrategy{})
	if err != nil {
		t.Fatal(err)
	}
	p := &Plugin{}
	spec, err := p.compile(sch, envelope.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"str", "ptr", "bytes", "named", "raw", "null"}
	if got := undeclared(sch, spec); !slices.Equal(got, want) {
		t.Errorf("undeclared = %q, want %q", got, want)
	}
	m := &model{spec: spec, open: want}
	typed, err := (&Plugin{dialect: envelope.SQLite}).withTypes(m, tableTypes{"str": "JSONB", "named": "int4range", "json_typ": "json"})
	if err != nil {
		t.Fatal(err)
	}
	if !typed.Typed() || typed.Model.Types["str"] != "JSONB" || typed.Model.Types["named"] != "int4range" ||
		typed.Model.Types["json_typ"] != "json" || spec.Model.Types["str"] != "" {
		t.Errorf("withTypes: typed %v, types %v (declared spec's %v)", typed.Typed(), typed.Model.Types, spec.Model.Types)
	}
	if same, _ := p.withTypes(m, tableTypes{"count": "int4range", "tagged": "jsonb"}); same != spec {
		t.Errorf("withTypes of columns that are not undeclared changed the spec: %v", same.Model.Types)
	}
}
