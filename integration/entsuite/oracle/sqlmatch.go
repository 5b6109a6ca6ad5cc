package oracle

import (
	"context"
	"database/sql/driver"
	"strconv"
	"strings"
)

// On SQLite nothing in a row tells a row an UPDATE rewrote with the
// values it held from a row no statement touched, so the oracle asks the
// database, right before each write statement of a captured table, which
// rows the statement will write: an UPDATE's WHERE, an upsert's conflict
// target (INSERT … ON CONFLICT (cols) DO UPDATE), read with the
// statement's own arguments. The parser knows the SQL ent and GORM write
// (? placeholders); a statement it cannot read is left to the comparison
// of values (an unchanged row it wrote then looks untouched).

// matched adds to w the keys of the rows query (about to run on c, with
// args) will write.
func (o *Oracle) matched(ctx context.Context, c *conn, query string, args []driver.NamedValue, w written) {
	sels := o.matchSelects(query, args)
	if len(sels) == 0 {
		return
	}
	q, err := c.querier()
	if err != nil {
		return
	}
	for _, m := range sels {
		pk, err := o.pkSQLite(ctx, q, m.table)
		if err != nil {
			return
		}
		if m.anyUnique {
			var ok bool
			if m, ok = o.anyUniqueSelect(ctx, q, m, pk); !ok {
				continue
			}
		}
		rows, err := q.QueryContext(ctx, m.query, m.args)
		if err != nil {
			trace("-- the oracle could not read the rows it writes: "+err.Error()+": "+m.query, m.args)
			continue
		}
		b, err := drain(rows)
		if err != nil {
			continue
		}
		for _, r := range b.rows {
			row := map[string]any{}
			for i, col := range b.cols {
				row[col] = jsonValue(r[i])
			}
			w.add(m.table, rowKey(row, pk))
		}
	}
}

// anyUniqueSelect completes the SELECT of an upsert with no conflict
// target: the rows holding the inserted row's value of the primary key or
// of any unique index (SQLite's DO UPDATE without a target applies to a
// conflict on any of them). false when no key's columns are all given.
func (o *Oracle) anyUniqueSelect(ctx context.Context, q driver.QueryerContext, m matchSelect, pk []string) (matchSelect, bool) {
	sets := [][]string{pk}
	idx, err := queryAll(ctx, q, "SELECT name FROM pragma_index_list("+strconv.Quote(m.table)+") WHERE \"unique\" = 1")
	if err != nil {
		return m, false
	}
	for _, r := range idx.rows {
		info, err := queryAll(ctx, q, "SELECT name FROM pragma_index_info("+strconv.Quote(asString(r[0]))+") ORDER BY seqno")
		if err != nil {
			return m, false
		}
		var cols []string
		for _, c := range info.rows {
			cols = append(cols, asString(c[0]))
		}
		sets = append(sets, cols)
	}
	var ors []string
	var args []driver.NamedValue
	for _, set := range sets {
		var and []string
		var as []driver.NamedValue
		for _, c := range set {
			v, ok := m.byCol[c]
			if !ok || c == "" {
				and = nil
				break
			}
			and = append(and, quote(c)+" = ?")
			as = append(as, v)
		}
		if len(and) == 0 {
			continue
		}
		ors = append(ors, "("+strings.Join(and, " AND ")+")")
		args = append(args, as...)
	}
	if len(ors) == 0 {
		return m, false
	}
	m.query += " WHERE " + strings.Join(ors, " OR ")
	m.args = renumber(args)
	return m, true
}

// matchSelect is a SELECT of the rows a statement writes.
type matchSelect struct {
	table string
	query string
	args  []driver.NamedValue
	// anyUnique: an upsert with no conflict target (SQLite: DO UPDATE
	// then applies to a conflict on any uniqueness constraint). query is
	// "SELECT * FROM t" and byCol holds the row's argument of each column
	// given as a plain ?; matched adds the WHERE from the table's unique
	// indexes and primary key.
	anyUnique bool
	byCol     map[string]driver.NamedValue
}

// matchSelects returns the SELECTs of the rows an UPDATE or upsert of a
// captured table writes; nil for another statement or one it cannot read.
func (o *Oracle) matchSelects(query string, args []driver.NamedValue) []matchSelect {
	q := strings.TrimSpace(query)
	if hasOtherPlaceholders(q) {
		return nil
	}
	switch {
	case hasPrefixFold(q, "UPDATE "):
		return o.updateSelect(q, args)
	case hasPrefixFold(q, "INSERT "):
		return o.upsertSelects(q, args)
	}
	return nil
}

// updateSelect: UPDATE t SET … [WHERE …] [RETURNING …].
func (o *Oracle) updateSelect(q string, args []driver.NamedValue) []matchSelect {
	set := topIndex(q, "SET", 0)
	if set < 0 {
		return nil
	}
	tbText := strings.TrimSpace(q[len("UPDATE "):set])
	if hasPrefixFold(tbText, "OR ") {
		return nil
	}
	tb := lastName(tbText)
	if _, ok := o.models[tb]; !ok {
		return nil
	}
	end := len(q)
	if r := topIndex(q, "RETURNING", set); r >= 0 {
		end = r
	}
	where := topIndex(q[:end], "WHERE", set)
	if topIndex(q[:end], "FROM", set) >= 0 || topIndex(q[:end], "ORDER", set) >= 0 || topIndex(q[:end], "LIMIT", set) >= 0 {
		return nil
	}
	sel := "SELECT * FROM " + tbText
	var wargs []driver.NamedValue
	if where >= 0 {
		n := placeholders(q[set:where])
		m := placeholders(q[where:end])
		if n+m > len(args) {
			return nil
		}
		sel += " " + q[where:end]
		wargs = renumber(args[n : n+m])
	}
	return []matchSelect{{table: tb, query: sel, args: wargs}}
}

// upsertSelects: INSERT INTO t (cols) VALUES (…), … ON CONFLICT (target)
// DO UPDATE SET … [RETURNING …]: a SELECT per row of VALUES of the row
// its conflict target names. DO NOTHING writes nothing; a DO UPDATE with
// a WHERE, or a target with one, is not read.
func (o *Oracle) upsertSelects(q string, args []driver.NamedValue) []matchSelect {
	conflict := topIndex(q, "ON", 0)
	for conflict >= 0 && !hasPrefixFold(strings.TrimSpace(q[conflict+2:]), "CONFLICT") {
		conflict = topIndex(q, "ON", conflict+2)
	}
	if conflict < 0 {
		return nil
	}
	rest := strings.TrimSpace(q[conflict+2:])
	rest = strings.TrimSpace(rest[len("CONFLICT"):])
	doAt := topIndex(rest, "DO", 0)
	if doAt < 0 || !hasPrefixFold(strings.TrimSpace(rest[doAt+2:]), "UPDATE") {
		return nil // DO NOTHING
	}
	target := strings.TrimSpace(rest[:doAt])
	anyUnique := target == ""
	if !anyUnique && (!strings.HasPrefix(target, "(") || !strings.HasSuffix(target, ")")) {
		return nil // a partial index's WHERE
	}
	update := rest[doAt:]
	end := len(update)
	if r := topIndex(update, "RETURNING", 0); r >= 0 {
		end = r
	}
	if topIndex(update[:end], "WHERE", 0) >= 0 {
		return nil // DO UPDATE … WHERE: it may write none of them
	}
	var tcols []string
	if !anyUnique {
		for _, c := range splitTop(target[1 : len(target)-1]) {
			tcols = append(tcols, lastName(strings.TrimSpace(c)))
		}
	}
	head := q[:conflict]
	into := topIndex(head, "INTO", 0)
	values := topIndex(head, "VALUES", 0)
	if into < 0 || values < 0 {
		return nil
	}
	tv := strings.TrimSpace(head[into+4 : values])
	open := strings.IndexByte(tv, '(')
	if open < 0 || !strings.HasSuffix(tv, ")") {
		return nil
	}
	tbText := strings.TrimSpace(tv[:open])
	tb := lastName(tbText)
	if _, ok := o.models[tb]; !ok {
		return nil
	}
	var cols []string
	for _, c := range splitTop(tv[open+1 : len(tv)-1]) {
		cols = append(cols, lastName(strings.TrimSpace(c)))
	}
	pos := placeholders(head[:values])
	var out []matchSelect
	for _, tuple := range splitTop(head[values+len("VALUES"):]) {
		tuple = strings.TrimSpace(tuple)
		if !strings.HasPrefix(tuple, "(") || !strings.HasSuffix(tuple, ")") {
			return out
		}
		elems := splitTop(tuple[1 : len(tuple)-1])
		if len(elems) != len(cols) {
			return out
		}
		byCol := map[string]int{} // column -> its argument, when the element is one ?
		for i, e := range elems {
			n := placeholders(e)
			if strings.TrimSpace(e) == "?" {
				byCol[cols[i]] = pos
			}
			pos += n
		}
		if anyUnique {
			vals := map[string]driver.NamedValue{}
			for c, i := range byCol {
				if i < len(args) {
					vals[c] = args[i]
				}
			}
			out = append(out, matchSelect{table: tb, query: "SELECT * FROM " + tbText, anyUnique: true, byCol: vals})
			continue
		}
		var where []string
		var wargs []driver.NamedValue
		for _, c := range tcols {
			i, ok := byCol[c]
			if !ok || i >= len(args) {
				where = nil
				break
			}
			where = append(where, quote(c)+" = ?")
			wargs = append(wargs, args[i])
		}
		if where == nil {
			continue
		}
		out = append(out, matchSelect{table: tb, query: "SELECT * FROM " + tbText + " WHERE " + strings.Join(where, " AND "), args: renumber(wargs)})
	}
	return out
}

func renumber(args []driver.NamedValue) []driver.NamedValue {
	out := make([]driver.NamedValue, len(args))
	for i, a := range args {
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: a.Value}
	}
	return out
}

func hasPrefixFold(s, p string) bool { return len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) }

// lastName is the table or column of a possibly qualified, quoted name.
func lastName(s string) string {
	parts := splitOutside(s, '.')
	n := strings.TrimSpace(parts[len(parts)-1])
	if len(n) >= 2 && (n[0] == '`' || n[0] == '"' || n[0] == '[') {
		n = n[1 : len(n)-1]
	}
	return n
}

// scan walks q outside quotes: f gets each byte's index and the
// parenthesis depth; it returns false to stop.
func scan(q string, f func(i, depth int) bool) {
	depth := 0
	for i := 0; i < len(q); i++ {
		switch c := q[i]; c {
		case '\'', '"', '`':
			j := i + 1
			for j < len(q) && q[j] != c {
				j++
			}
			i = j
			continue
		case '(':
			depth++
			continue
		case ')':
			depth--
			continue
		}
		if !f(i, depth) {
			return
		}
	}
}

// topIndex finds keyword kw (a whole word, any case) at depth 0 outside
// quotes, from index from; -1 if absent.
func topIndex(q, kw string, from int) int {
	at := -1
	scan(q, func(i, depth int) bool {
		if i < from || depth != 0 || !hasPrefixFold(q[i:], kw) {
			return true
		}
		if i > 0 && isWord(q[i-1]) || i+len(kw) < len(q) && isWord(q[i+len(kw)]) {
			return true
		}
		at = i
		return false
	})
	return at
}

func isWord(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// placeholders counts the ? of s outside quotes.
func placeholders(s string) int {
	n := 0
	scan(s, func(i, _ int) bool {
		if s[i] == '?' {
			n++
		}
		return true
	})
	return n
}

// hasOtherPlaceholders reports $1, :name or @name placeholders, which
// the parser does not count.
func hasOtherPlaceholders(s string) bool {
	found := false
	scan(s, func(i, _ int) bool {
		if (s[i] == '$' || s[i] == ':' || s[i] == '@') && i+1 < len(s) && isWord(s[i+1]) {
			found = true
			return false
		}
		return true
	})
	return found
}

// splitTop splits s at the commas at depth 0 outside quotes.
func splitTop(s string) []string { return splitOutside(s, ',') }

func splitOutside(s string, sep byte) []string {
	var out []string
	last := 0
	scan(s, func(i, depth int) bool {
		if depth == 0 && s[i] == sep {
			out = append(out, s[last:i])
			last = i + 1
		}
		return true
	})
	return append(out, s[last:])
}
