package main

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// The bulk rows: plain, captured BeforeAndAfter, and updated by the
// hand-written floor.
type PlainBulk struct {
	ID      int64
	Name    string
	Status  string
	Amount  int
	Version int64
}

type (
	CapturedBulk PlainBulk
	FloorBulk    PlainBulk
)

// floorSQL is the least a BeforeAndAfter capture of the update can do in
// herald's table: lock and read the rows (before), update them, and insert
// one event per row with both images, as one statement.
const floorSQL = `WITH before AS (SELECT * FROM floor_bulks WHERE amount >= 0 FOR UPDATE),
u AS (UPDATE floor_bulks f SET status = ?, version = f.version + 1 FROM before b WHERE f.id = b.id
      RETURNING f.id, f.name, f.status, f.amount, f.version, row_to_json(b) AS before_image)
INSERT INTO herald_outbox (id, topic, payload, ordering_key, created_at)
SELECT gen_random_uuid(), 'floor_bulk.updated',
       json_build_object('model', 'FloorBulk', 'operation', 'updated', 'pk', u.id, 'before', u.before_image,
           'after', json_build_object('id', u.id, 'name', u.name, 'status', u.status, 'amount', u.amount, 'version', u.version)),
       'floor_bulks:' || u.id, now()
FROM u`

// bulkRound times one Updates of cfg.bulkRows rows on each side, and
// returns the times and the ratios.
func bulkRound(ctx context.Context, cfg config) ([]figure, error) {
	plain, herald, err := gormDBs(cfg, nil)
	if err != nil {
		return nil, err
	}
	plainSQL, _ := plain.DB()
	heraldSQL, _ := herald.DB()
	defer plainSQL.Close()
	defer heraldSQL.Close()
	plain, herald = plain.WithContext(ctx), herald.WithContext(ctx)
	for _, m := range []any{&PlainBulk{}, &CapturedBulk{}, &FloorBulk{}} {
		if err := plain.Session(&gorm.Session{AllowGlobalUpdate: true}).Delete(m).Error; err != nil {
			return nil, err
		}
	}
	rows := make([]PlainBulk, cfg.bulkRows)
	for i := range rows {
		rows[i] = PlainBulk{Name: fmt.Sprint("r", i), Status: "new", Amount: i}
	}
	if err := plain.CreateInBatches(&rows, 2000).Error; err != nil {
		return nil, err
	}
	if err := plain.Exec(`INSERT INTO captured_bulks (name, status, amount, version) SELECT name, status, amount, version FROM plain_bulks`).Error; err != nil {
		return nil, err
	}
	if err := plain.Exec(`INSERT INTO floor_bulks (name, status, amount, version) SELECT name, status, amount, version FROM plain_bulks`).Error; err != nil {
		return nil, err
	}
	for _, q := range []string{`ANALYZE plain_bulks`, `ANALYZE captured_bulks`, `ANALYZE floor_bulks`, `CHECKPOINT`} {
		if err := plain.Exec(q).Error; err != nil {
			return nil, err
		}
	}
	upd := map[string]any{"status": "s", "version": gorm.Expr("version + 1")}
	check := func(tx *gorm.DB) error {
		if tx.Error != nil {
			return tx.Error
		}
		if tx.RowsAffected != int64(cfg.bulkRows) {
			return fmt.Errorf("bulk: %d rows affected, want %d", tx.RowsAffected, cfg.bulkRows)
		}
		return nil
	}
	s := time.Now()
	if err := check(plain.Model(&PlainBulk{}).Where("amount >= ?", 0).Updates(upd)); err != nil {
		return nil, err
	}
	tp := time.Since(s)
	s = time.Now()
	if err := check(herald.Model(&CapturedBulk{}).Where("amount >= ?", 0).Updates(upd)); err != nil {
		return nil, err
	}
	th := time.Since(s)
	s = time.Now()
	if err := check(plain.Exec(floorSQL, "s")); err != nil {
		return nil, err
	}
	tf := time.Since(s)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return []figure{
		{"plain Updates", "ms", ms(tp), "", ""},
		{"herald, captured BeforeAndAfter", "ms", ms(th), "", ""},
		{"hand-written floor (one statement into herald's table)", "ms", ms(tf), "", ""},
		{"herald ÷ plain", "×", float64(th) / float64(tp), "", ""},
		{"floor ÷ plain", "×", float64(tf) / float64(tp), "", ""},
		{"herald ÷ floor", "×", float64(th) / float64(tf), "", ""},
	}, nil
}
