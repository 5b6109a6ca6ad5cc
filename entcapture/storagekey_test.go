package entcapture_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/heraldgo/herald/entcapture/internal/entshapes/ent/site"
	"github.com/heraldgo/herald/envelope"
)

// TestFieldNamedUnlikeItsColumn: a field whose column is not its name
// (field.Strings("URLs") is column ur_ls, field.String("headline") has
// StorageKey "title") — ent's mutation names it by its column — is in a
// create's after image as set, not null, is listed in an update's
// Changed, and an AppendURLs, also on a NULL column, has the list as
// stored in its after image. Before: the create's image said null (ent's
// suite, json folder, AppendURLs on SetURLs' row; the harness reported it
// on the update).
func TestFieldNamedUnlikeItsColumn(t *testing.T) {
	eachShape(t, func(t *testing.T, s *shapes) {
		rowOf := func(id int) map[string]any {
			return s.readTable(t, "sites", []string{"id"})[fmt.Sprintf("id=%d", id)]
		}
		var seen int
		// check compares the only new event with the row as stored.
		check := func(name string, op envelope.Operation, id int, changed ...string) {
			t.Helper()
			evs := s.events(t)[seen:]
			seen += len(evs)
			if len(evs) != 1 {
				t.Fatalf("%s: %d events, want 1", name, len(evs))
			}
			var p struct {
				Operation string
				After     map[string]any
				Changed   []string
			}
			must(t, json.Unmarshal(evs[0].Payload, &p))
			if p.Operation != string(op) {
				t.Fatalf("%s: %s event, want %s", name, p.Operation, op)
			}
			for _, c := range changed {
				if !slices.Contains(p.Changed, c) {
					t.Errorf("%s: changed = %v, want it to name %s", name, p.Changed, c)
				}
			}
			if s.mode == envelope.Keys {
				return
			}
			stored := rowOf(id)
			for _, c := range []string{"ur_ls", "title"} {
				if got, want := jsonText(p.After[c]), storedText(stored[c]); got != want {
					t.Errorf("%s: after.%s = %s, the row holds %s", name, c, got, want)
				}
			}
		}
		a := s.c.Site.Create().SetURLs([]string{"a"}).SetHeadline("h").SaveX(ctx)
		check("create", envelope.Inserted, a.ID)
		s.c.Site.UpdateOneID(a.ID).AppendURLs([]string{"b"}).ExecX(ctx)
		check("AppendURLs", envelope.Updated, a.ID, "ur_ls")
		s.c.Site.UpdateOneID(a.ID).SetHeadline("g").ExecX(ctx)
		check("SetHeadline", envelope.Updated, a.ID, "title")
		b := s.c.Site.Create().SaveX(ctx)
		check("create with NULLs", envelope.Inserted, b.ID)
		s.c.Site.UpdateOneID(b.ID).AppendURLs([]string{"x"}).ExecX(ctx)
		check("AppendURLs on NULL", envelope.Updated, b.ID, "ur_ls")
		s.c.Site.Update().Where(site.ID(b.ID)).AppendURLs([]string{"y"}).SetHeadline("k").ExecX(ctx)
		check("bulk AppendURLs", envelope.Updated, b.ID, "ur_ls", "title")
	})
}

// jsonText is the JSON of an image's value.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// storedText is the JSON of a stored column's value: the JSON a list's
// column holds (normalized), a string's JSON text otherwise.
func storedText(v any) string {
	if s, ok := v.(string); ok {
		var l []any
		if json.Unmarshal([]byte(s), &l) == nil {
			return jsonText(l)
		}
	}
	return jsonText(v)
}
