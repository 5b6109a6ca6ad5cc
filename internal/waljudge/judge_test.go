package waljudge

import (
	"strings"
	"testing"
)

// feed runs test_decoding lines ("xid|data") through a decoder and a judge.
func feed(t *testing.T, j *Judge, lines ...string) {
	t.Helper()
	var d Decoder
	for _, l := range lines {
		x, data, _ := strings.Cut(l, "|")
		var xid uint32
		for _, c := range x {
			xid = xid*10 + uint32(c-'0')
		}
		txn, msg, err := d.Feed(xid, data)
		if err != nil {
			t.Fatal(err)
		}
		if msg != nil {
			j.Message(*msg)
		}
		if txn != nil {
			j.Txn(txn)
		}
	}
}

func outbox(payload string) string {
	return `table public.herald_outbox: INSERT: id[uuid]:'0190' topic[text]:'t' payload[json]:'` + strings.ReplaceAll(payload, "'", "''") + `' sequence[bigint]:1`
}

// Each kind of finding, per test, from the log alone; raw SQL and exempt
// tables are listed, not counted; images compare by type.
func TestJudge(t *testing.T) {
	j := New(Config{Outbox: "herald_outbox", Images: true, Exempt: func(table string) string {
		if table == "nokey" {
			return "model without a primary key"
		}
		return ""
	}})
	feed(t, j,
		`1|message: transactional: 1 prefix: herald_judge_key, sz: 17 content:public.users	id`,
		`1|message: transactional: 1 prefix: herald_judge_key, sz: 30 content:public."UserLangs"	`,
		`1|BEGIN 1`, `1|COMMIT 1`,
		`0|message: transactional: 0 prefix: herald_judge_test, sz: 5 content:TestA`,
		// A matched insert, a missing update, a matched soft delete with a
		// wrong image, and a phantom event.
		`2|BEGIN 2`,
		`2|table public.users: INSERT: id[bigint]:1 name[text]:'it''s' at[timestamp with time zone]:'2026-12-01 21:37:42.44013+00' b[bytea]:'\x2a2a' j[jsonb]:'{"a": 1}' n[numeric]:12.50`,
		`2|`+outbox(`{"model":"User","operation":"inserted","pk":1,"after":{"id":1,"name":"it's","at":"2026-12-01T22:37:42.44013+01:00","b":"Kio=","j":"{\"a\":1}","n":"12.5"}}`),
		`2|table public.users: UPDATE: id[bigint]:2 name[text]:'x'`,
		`2|table public.users: UPDATE: old-key: id[bigint]:3 name[text]:'y' new-tuple: id[bigint]:3 name[text]:'z'`,
		`2|`+outbox(`{"model":"User","operation":"updated","pk":3,"before":{"id":3,"name":"y"},"after":{"id":3,"name":null}}`),
		`2|`+outbox(`{"model":"User","operation":"deleted","pk":9}`),
		// An old row lacks its NULL columns: the before image's null matches.
		`2|table public.users: DELETE: id[bigint]:6`,
		`2|`+outbox(`{"model":"User","operation":"deleted","pk":6,"before":{"id":6,"name":null}}`),
		`2|COMMIT 2`,
		`0|message: transactional: 0 prefix: herald_judge_test, sz: 5 content:TestB`,
		// A duplicate, a wrong operation, raw SQL, an exempt table, a
		// composite key read from the event.
		`3|BEGIN 3`,
		`3|message: transactional: 1 prefix: herald_judge_raw, sz: 20 content:DELETE FROM "pets"`,
		`3|table public.users: INSERT: id[bigint]:4 name[text]:'a'`,
		`3|`+outbox(`{"model":"User","operation":"inserted","pk":4}`),
		`3|`+outbox(`{"model":"User","operation":"inserted","pk":4}`),
		`3|table public.users: DELETE: id[bigint]:5 name[text]:'a'`,
		`3|`+outbox(`{"model":"User","operation":"updated","pk":5}`),
		`3|table public.pets: DELETE: id[bigint]:1`,
		`3|table public.nokey: INSERT: a[integer]:1`,
		`3|table public."UserLangs": INSERT: user_id[bigint]:1 lang[text]:'en'`,
		`3|`+outbox(`{"model":"UserLang","operation":"inserted","pk":{"user_id":1,"lang":"en"}}`),
		`3|COMMIT 3`,
	)
	r := j.Report()
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.Kind+" "+f.Test+" "+f.Table+" "+f.Op+" "+f.Key)
	}
	want := []string{
		"phantom TestA users deleted 9",
		"missing TestA users UPDATE 2",
		"image TestA users UPDATE 3",
		"duplicate TestB users inserted 4",
		"wrong-operation TestB users DELETE 5",
		"raw-sql TestB pets DELETE ",
		"exempt TestB nokey INSERT ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("findings:\n%s\nwant:\n%s\n%+v", strings.Join(got, "\n"), strings.Join(want, "\n"), r.Findings)
	}
	if r.Txns != 2 || r.Changes != 9 || r.Events != 8 || r.Matched != 5 || r.Missing != 1 || r.Phantom != 1 || r.Duplicate != 1 ||
		r.WrongOp != 1 || r.Mismatched != 1 || r.RawChanges != 1 || r.ExemptChanges != 1 || r.Compared != 12 {
		t.Errorf("report %+v", *r)
	}
}

func TestParseChange(t *testing.T) {
	c, err := ParseChange(`table public."Odd": UPDATE: old-key: "ID"[bigint]:1 arr[text[]]:'{a,"b c"}' new-tuple: "ID"[bigint]:1 arr[text[]]:null t[text]:unchanged-toast-datum`)
	if err != nil {
		t.Fatal(err)
	}
	if c.Table != `public."Odd"` || Bare(c.Table) != "Odd" || c.Op != "UPDATE" || c.Old.Values["arr"].Text != `{a,"b c"}` ||
		c.Old.Values["ID"].Text != "1" || !c.New.Values["arr"].Null || !c.New.Values["t"].Unchanged || len(c.New.Cols) != 3 {
		t.Fatalf("%+v old %+v new %+v", c, c.Old, c.New)
	}
}
