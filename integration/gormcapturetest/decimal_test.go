package gormcapture_test

import (
	"encoding/json"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// Priced has decimal columns declared with a scale, and one without.
type Priced struct {
	ID    uint
	Fee   decimal.Decimal     `gorm:"type:numeric(10,2)"`
	Rate  decimal.Decimal     `gorm:"type:decimal(12,4)"`
	Tip   decimal.NullDecimal `gorm:"type:numeric(8,1)"`
	Plain decimal.Decimal     `gorm:"type:numeric"`
}

func (Priced) ChangeCapture() envelope.Options {
	return envelope.Options{Payload: envelope.BeforeAndAfter}
}

// TestDecimalScale: captured decimals keep their column's declared scale
// on both dialects ("12.50", "0.00"), as PostgreSQL returns them — SQLite
// stores 12.5 — on every path: single and batch create, update (before
// and after), delete. The same writes give the same images on both.
// (A value with more digits than the scale is not rounded: SQLite stores
// it as given, PostgreSQL rounds it; the event holds what is stored.)
func TestDecimalScale(t *testing.T) {
	t.Parallel()
	images := map[envelope.Dialect][]string{}
	for _, d := range []envelope.Dialect{envelope.Postgres, envelope.SQLite} {
		e := newEnv(t, d, nil, gormcapture.Config{}, &Priced{})
		one := &Priced{Fee: decimal.NewFromFloat(12.5), Rate: decimal.RequireFromString("1.5"), Plain: decimal.RequireFromString("3.1")}
		must(t, e.db.Create(one).Error)
		two := []Priced{{Fee: decimal.Zero, Tip: decimal.NullDecimal{Decimal: decimal.RequireFromString("2"), Valid: true}}, {Fee: decimal.RequireFromString("1.2")}}
		must(t, e.db.Create(&two).Error)
		must(t, e.db.Model(one).Update("fee", decimal.RequireFromString("7.1")).Error)
		must(t, e.db.Delete(&Priced{}, two[1].ID).Error)
		var got []string
		for _, ev := range e.events(t) {
			for _, k := range []string{"before", "after"} {
				b, err := json.Marshal(ev.Payload[k])
				must(t, err)
				got = append(got, k+" "+string(b))
			}
		}
		images[d] = got
	}
	want := []string{
		`before null`,
		`after {"fee":"12.50","id":1,"plain":"3.1","rate":"1.5000","tip":null}`,
		`before null`,
		`after {"fee":"0.00","id":2,"plain":"0","rate":"0.0000","tip":"2.0"}`,
		`before null`,
		`after {"fee":"1.20","id":3,"plain":"0","rate":"0.0000","tip":null}`,
		`before {"fee":"12.50","id":1,"plain":"3.1","rate":"1.5000","tip":null}`,
		`after {"fee":"7.10","id":1,"plain":"3.1","rate":"1.5000","tip":null}`,
		`before {"fee":"1.20","id":3,"plain":"0","rate":"0.0000","tip":null}`,
		`after null`,
	}
	for _, d := range []envelope.Dialect{envelope.Postgres, envelope.SQLite} {
		if len(images[d]) != len(want) {
			t.Fatalf("%s: %d images, want %d: %q", d, len(images[d]), len(want), images[d])
		}
		for i := range want {
			if images[d][i] != want[i] {
				t.Errorf("%s image %d:\n got %s\nwant %s", d, i, images[d][i], want[i])
			}
		}
	}
}
