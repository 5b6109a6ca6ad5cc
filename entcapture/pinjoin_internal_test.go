package entcapture

import (
	"reflect"
	"testing"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"
)

// TestPinJoin: ent's UPDATE and DELETE pinned to a key set (mysqlPin)
// become the same writes joined to the key set, with the key set's one
// parameter first; statements without a pin are left alone.
func TestPinJoin(t *testing.T) {
	pinned := func(build func(p *sql.Predicate) sql.Querier) (string, []any) {
		p := mysqlPin([]string{"`tags`.`code`"}, [][]any{{"a"}, {"b"}})
		return build(p).Query()
	}
	q, args := pinned(func(p *sql.Predicate) sql.Querier {
		return sql.Dialect(dialect.MySQL).Update("tags").Set("label", "y").Where(sql.And(sql.EQ("kind", 3), p))
	})
	gq, gargs := pinJoin(q, args)
	want := "UPDATE `tags` JOIN JSON_TABLE(?, '$[*]' COLUMNS(`c0` VARCHAR(3072) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]')) AS `herald_keys` ON `tags`.`code` = `herald_keys`.`c0` SET `label` = ? WHERE `kind` = ? AND TRUE"
	if gq != want || !reflect.DeepEqual(gargs, []any{`[["a"],["b"]]`, "y", 3}) {
		t.Errorf("UPDATE:\n %s %v\n->\n %s %v\nwant\n %s", q, args, gq, gargs, want)
	}

	q, args = pinned(func(p *sql.Predicate) sql.Querier {
		return sql.Dialect(dialect.MySQL).Delete("tags").Schema("db").Where(sql.And(p, sql.EQ("kind", 3)))
	})
	gq, gargs = pinJoin(q, args)
	want = "DELETE `db`.`tags` FROM `db`.`tags` JOIN JSON_TABLE(?, '$[*]' COLUMNS(`c0` VARCHAR(3072) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]')) AS `herald_keys` ON `tags`.`code` = `herald_keys`.`c0` WHERE TRUE AND `kind` = ?"
	if gq != want || !reflect.DeepEqual(gargs, []any{`[["a"],["b"]]`, 3}) {
		t.Errorf("DELETE:\n %s %v\n->\n %s %v\nwant\n %s", q, args, gq, gargs, want)
	}

	plain := "UPDATE `tags` SET `label` = ? WHERE `kind` = ?"
	if gq, _ := pinJoin(plain, []any{"y", 3}); gq != plain {
		t.Errorf("a statement without a pin changed: %s", gq)
	}
}
