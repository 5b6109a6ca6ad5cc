package gormcapture_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// Regressions found by running GORM's own test suite with every model
// captured (integration/gormsuite), each in the shape the suite used.

// allModes runs f once per payload mode.
func allModes(t *testing.T, f func(t *testing.T, mode envelope.PayloadMode)) {
	t.Helper()
	for _, m := range []struct {
		name string
		mode envelope.PayloadMode
	}{{"keys", envelope.Keys}, {"after", envelope.After}, {"beforeandafter", envelope.BeforeAndAfter}} {
		t.Run(m.name, func(t *testing.T) { f(t, m.mode) })
	}
}

// captureAllEnv opens a database with the plugin capturing every model in
// mode (Config.CaptureAll), and migrates models.
func captureAllEnv(t *testing.T, d envelope.Dialect, mode envelope.PayloadMode, gcfg *gorm.Config, models ...any) *env {
	t.Helper()
	return newEnv(t, d, gcfg, gormcapture.Config{CaptureAll: &envelope.Options{Payload: mode}}, models...)
}

type SuiteLang struct {
	Code string `gorm:"primaryKey"`
	Name string
}

type SuiteSoft struct {
	gorm.Model
	Name string
}

// db.Table(name) names the table: the SQLite write lock taken before a
// read (BeforeAndAfter updates, Save's upsert, deletes) quoted an empty
// name and appended the table to the caller's SQL ("near SET: syntax
// error"). GORM's TestSaveWithPrimaryValue, TestUpdates,
// TestDeleteWithTable.
func TestTableNameWrites(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		allModes(t, func(t *testing.T, mode envelope.PayloadMode) {
			e := captureAllEnv(t, d, mode, nil)
			must(t, e.db.Table("suite_langs_x").AutoMigrate(&SuiteLang{}))
			must(t, e.db.Table("suite_softs_x").AutoMigrate(&SuiteSoft{}))
			l := SuiteLang{Code: "a", Name: "one"}
			must(t, e.db.Table("suite_langs_x").Save(&l).Error) // insert
			l.Name = "two"
			must(t, e.db.Table("suite_langs_x").Save(&l).Error) // update
			must(t, e.db.Table("suite_langs_x").Where("code IN ?", []string{"a"}).Updates(SuiteLang{Name: "three"}).Error)
			s := SuiteSoft{Name: "s"}
			must(t, e.db.Table("suite_softs_x").Create(&s).Error)
			must(t, e.db.Table("suite_softs_x").Delete(&s).Error)            // soft
			must(t, e.db.Table("suite_softs_x").Unscoped().Delete(&s).Error) // hard
			must(t, e.db.Table("suite_langs_x").Delete(&l).Error)
			var got []string
			for _, ev := range e.events(t) {
				got = append(got, ev.Topic)
			}
			want := []string{"suite_lang.inserted", "suite_lang.updated", "suite_lang.updated",
				"suite_soft.inserted", "suite_soft.updated", "suite_soft.deleted", "suite_lang.deleted"}
			if len(got) != len(want) {
				t.Fatalf("events %q, want %q", got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("events %q, want %q", got, want)
				}
			}
			var n int64
			must(t, e.db.Table("suite_langs_x").Count(&n).Error)
			if n != 0 {
				t.Errorf("%d rows left", n)
			}
		})
	})
}

type SuiteUser struct {
	ID   int64
	Name string
}

type SuiteAccount struct {
	ID          int64
	SuiteUserID int64
	Number      string
}

// UPDATE … FROM (clause.From): the before image read the statement's
// WHERE without the FROM's tables ("missing FROM-clause entry", SQLite
// "no such column"), and the update affected no row. A user joined to two
// accounts is updated, and captured, once. GORM's TestUpdateFrom.
func TestUpdateFrom(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		allModes(t, func(t *testing.T, mode envelope.PayloadMode) {
			e := captureAllEnv(t, d, mode, nil, &SuiteUser{}, &SuiteAccount{})
			users := []SuiteUser{{Name: "a"}, {Name: "b"}, {Name: "c"}}
			must(t, e.db.Create(&users).Error)
			must(t, e.db.Create(&[]SuiteAccount{{SuiteUserID: 1, Number: "n1"}, {SuiteUserID: 1, Number: "n1b"}, {SuiteUserID: 2, Number: "n2"}}).Error)
			clearEvents(t, e)
			res := e.db.Model(&SuiteUser{}).Clauses(clause.From{Tables: []clause.Table{{Name: "suite_accounts"}}}).
				Where("suite_accounts.suite_user_id = suite_users.id AND suite_accounts.number LIKE ?", "n%").
				Update("name", gorm.Expr("suite_users.name || 'x'"))
			must(t, res.Error)
			if res.RowsAffected != 2 {
				t.Errorf("RowsAffected = %d, want 2", res.RowsAffected)
			}
			evs := e.events(t)
			wantLines(t, evs, "suite_user.updated 1 [name]", "suite_user.updated 2 [name]")
			if mode == envelope.BeforeAndAfter && len(evs) == 2 {
				for i, want := range []string{"a", "b"} {
					b, _ := evs[i].Payload["before"].(map[string]any)
					a, _ := evs[i].Payload["after"].(map[string]any)
					if b["name"] != want || a["name"] != want+"x" {
						t.Errorf("event %d: before %v after %v", i, b, a)
					}
				}
			}
		})
	})
}

type SuiteOwner struct {
	ID   int64
	Name string
	Pets []SuitePet
}

type SuitePet struct {
	ID           int64
	SuiteOwnerID int64
	Name         string
}

// An association save mixing existing children and a new one: GORM's
// PostgreSQL dialector puts DEFAULT in place of the new child's key, and
// the before-read of the conflicting rows named it (`IN ('2','1',DEFAULT)`).
// GORM's TestHasManyAssociation and its polymorphic, single-table and
// many-to-many variants.
func TestAssociationUpsertWithNewChild(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		allModes(t, func(t *testing.T, mode envelope.PayloadMode) {
			e := captureAllEnv(t, d, mode, nil, &SuiteOwner{}, &SuitePet{})
			o := SuiteOwner{Name: "o", Pets: []SuitePet{{Name: "p1"}, {Name: "p2"}}}
			must(t, e.db.Create(&o).Error)
			o2 := SuiteOwner{Name: "o2"}
			must(t, e.db.Create(&o2).Error)
			clearEvents(t, e)
			// p2 and p1 move to o2, p3 is new.
			must(t, e.db.Model(&o2).Association("Pets").Append(&o.Pets[1], &o.Pets[0], &SuitePet{Name: "p3"}))
			evs := e.events(t)
			wantLines(t, evs, "suite_pet.updated 1 [suite_owner_id]", "suite_pet.updated 2 [suite_owner_id]", "suite_pet.inserted 3")
			if mode == envelope.BeforeAndAfter {
				for _, ev := range evs {
					if ev.Topic != "suite_pet.updated" {
						continue
					}
					b, _ := ev.Payload["before"].(map[string]any)
					a, _ := ev.Payload["after"].(map[string]any)
					if b["suite_owner_id"] != float64(1) || a["suite_owner_id"] != float64(2) {
						t.Errorf("pet %v: before %v after %v", ev.Payload["pk"], b, a)
					}
				}
			}
			var n int64
			must(t, e.db.Model(&SuitePet{}).Where("suite_owner_id = ?", o2.ID).Count(&n).Error)
			if n != 3 {
				t.Errorf("o2 has %d pets, want 3", n)
			}
		})
	})
}

// With PrepareStmt, herald's own statements (event INSERTs, locks,
// before-reads) went through the caller's prepared-statement cache: one
// Update left 2 cached statements instead of 1, and could evict the
// caller's. The cache holds what it holds without the plugin. GORM's
// TestPreparedStmtDeadlock (with MaxOpenConns 1).
func TestPrepareStmtCacheUntouched(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		allModes(t, func(t *testing.T, mode envelope.PayloadMode) {
			work := func(db *gorm.DB, maxOpen int) []int {
				sqlDB, err := db.DB()
				must(t, err)
				sqlDB.SetMaxOpenConns(maxOpen)
				ps := db.Session(&gorm.Session{PrepareStmt: true})
				cached := func() int { return len(ps.ConnPool.(*gorm.PreparedStmtDB).Stmts.Keys()) }
				var out []int
				u := SuiteUser{Name: "a"}
				must(t, ps.Create(&u).Error)
				out = append(out, cached())
				must(t, ps.Create(&[]SuiteUser{{Name: "b"}, {Name: "c"}}).Error)
				out = append(out, cached())
				must(t, ps.Model(&u).Update("name", "x").Error)
				out = append(out, cached())
				must(t, ps.Transaction(func(tx *gorm.DB) error {
					return tx.Model(&SuiteUser{}).Where("name <> ?", "zz").Update("name", "y").Error
				}))
				out = append(out, cached())
				must(t, ps.Delete(&u).Error)
				out = append(out, cached())
				if n := sqlDB.Stats().InUse; n != 0 {
					t.Errorf("%d connections in use", n)
				}
				return out
			}
			for _, maxOpen := range []int{0, 1} {
				plain, _ := openDB(t, d, nil)
				must(t, plain.AutoMigrate(&SuiteUser{}))
				want := work(plain, maxOpen)
				e := captureAllEnv(t, d, mode, nil, &SuiteUser{})
				got := work(e.db, maxOpen)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("MaxOpenConns %d: cached statements after each write: %v, without the plugin %v", maxOpen, got, want)
				}
				if n := len(e.events(t)); n != 8 {
					t.Errorf("%d events, want 8", n)
				}
			}
		})
	})
}

type SuiteTag struct {
	ID    int64
	Code  string
	Label string
}

// OnConflict{OnConstraint, UpdateAll} in BeforeAndAfter: GORM fills
// Columns with the primary key for UpdateAll, the before-read used them
// instead of the constraint and found nothing, and the event said
// "before": null. The constraint's columns are read from the catalog, so
// the conflicting row's before image is right, in every mode. GORM's
// TestPostgresOnConstraint. A constraint that does not exist is
// ErrUnsupported naming it, and the write is undone.
func TestOnConstraintUpsert(t *testing.T) {
	t.Parallel()
	allModes(t, func(t *testing.T, mode envelope.PayloadMode) {
		e := captureAllEnv(t, envelope.Postgres, mode, nil, &SuiteTag{})
		must(t, e.db.Exec(`ALTER TABLE suite_tags ADD CONSTRAINT suite_tags_code_uq UNIQUE (code)`).Error)
		must(t, e.db.Create(&SuiteTag{Code: "a", Label: "A"}).Error)
		must(t, e.db.Clauses(clause.OnConflict{OnConstraint: "suite_tags_code_uq", UpdateAll: true}).
			Create(&SuiteTag{Code: "a", Label: "B"}).Error)
		must(t, e.db.Clauses(clause.OnConflict{OnConstraint: "suite_tags_code_uq", DoUpdates: clause.AssignmentColumns([]string{"label"})}).
			Create(&[]SuiteTag{{Code: "a", Label: "C"}, {Code: "b", Label: "D"}}).Error)
		evs := e.events(t)
		wantLines(t, evs, "suite_tag.inserted 1", "suite_tag.updated 1 [code label]", "suite_tag.updated 1 [label]", "suite_tag.inserted 4") // 2 and 3: the conflicting inserts took sequence values
		if mode == envelope.BeforeAndAfter && len(evs) == 4 {
			for i, want := range [][2]string{{"A", "B"}, {"B", "C"}} {
				b, _ := evs[i+1].Payload["before"].(map[string]any)
				a, _ := evs[i+1].Payload["after"].(map[string]any)
				if b["label"] != want[0] || a["label"] != want[1] {
					t.Errorf("update %d: before %v after %v, want label %s -> %s", i, b, a, want[0], want[1])
				}
			}
		}
		if mode != envelope.BeforeAndAfter {
			return
		}
		err := e.db.Clauses(clause.OnConflict{OnConstraint: "no_such_constraint", UpdateAll: true}).Create(&SuiteTag{Code: "a", Label: "X"}).Error
		if !errors.Is(err, envelope.ErrUnsupported) || !strings.Contains(err.Error(), "no_such_constraint") {
			t.Errorf("unknown constraint: %v, want ErrUnsupported naming it", err)
		}
		var got SuiteTag
		must(t, e.db.Where("code = ?", "a").First(&got).Error)
		if got.Label != "C" {
			t.Errorf("label %q", got.Label)
		}
	})
}

// Two struct types on one table with different constraint tags (GORM's
// TestForeignKeyConstraints and TestForeignKeyConstraintsBelongsTo
// declare Member and Profile in each test): the cascade plan was keyed by
// table name, so deleting the second test's profile followed the first
// test's constraint and read members.refer, a column the table no longer
// has. Each type's delete follows its own declared constraints.
func TestTwoTypesOneTableCascade(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := captureAllEnv(t, d, envelope.After, nil)
		{
			type SuiteProfile struct {
				ID            uint
				Name          string
				SuiteMemberID uint
			}
			type SuiteMember struct {
				ID           uint
				Refer        uint `gorm:"uniqueIndex"`
				Name         string
				SuiteProfile SuiteProfile `gorm:"constraint:OnUpdate:CASCADE,OnDelete:CASCADE;foreignKey:SuiteMemberID;references:Refer"`
			}
			must(t, e.db.AutoMigrate(&SuiteMember{}))
			must(t, e.db.AutoMigrate(&SuiteProfile{}))
			m := SuiteMember{Refer: 1, Name: "m", SuiteProfile: SuiteProfile{Name: "p"}}
			must(t, e.db.Create(&m).Error)
			clearEvents(t, e)
			if r := e.db.Delete(&m); r.Error != nil || r.RowsAffected != 1 {
				t.Fatalf("delete member: %v, %d rows", r.Error, r.RowsAffected)
			}
			wantLines(t, e.events(t), "suite_member.deleted 1", "suite_profile.deleted 1")
			var n int64
			must(t, e.db.Model(&SuiteProfile{}).Count(&n).Error)
			if n != 0 {
				t.Errorf("%d profiles left: the database did not cascade", n)
			}
			must(t, e.db.Migrator().DropTable(&SuiteProfile{}, &SuiteMember{}))
		}
		{
			type SuiteProfile struct {
				ID    uint
				Name  string
				Refer uint `gorm:"uniqueIndex"`
			}
			type SuiteMember struct {
				ID             uint
				Name           string
				SuiteProfileID uint
				SuiteProfile   SuiteProfile `gorm:"constraint:OnUpdate:CASCADE,OnDelete:CASCADE;foreignKey:SuiteProfileID;references:Refer"`
			}
			must(t, e.db.AutoMigrate(&SuiteProfile{}, &SuiteMember{}))
			m := SuiteMember{Name: "m", SuiteProfile: SuiteProfile{Name: "p", Refer: 1}}
			must(t, e.db.Create(&m).Error)
			clearEvents(t, e)
			if r := e.db.Delete(&m.SuiteProfile); r.Error != nil || r.RowsAffected != 1 {
				t.Fatalf("delete profile: %v, %d rows", r.Error, r.RowsAffected)
			}
			wantLines(t, e.events(t), "suite_profile.deleted 1", "suite_member.deleted 1")
			var n int64
			must(t, e.db.Model(&SuiteMember{}).Count(&n).Error)
			if n != 0 {
				t.Errorf("%d members left: the database did not cascade", n)
			}
		}
	})
}

type (
	SuitePerson struct {
		ID        int
		Name      string
		Addresses []SuiteAddress `gorm:"many2many:suite_person_addresses;"`
	}
	SuiteAddress struct {
		ID   uint
		Name string
	}
	// GORM's documented SetupJoinTable example: no primaryKey tags.
	SuitePersonAddress struct {
		SuitePersonID  int
		SuiteAddressID int
		CreatedAt      time.Time
		DeletedAt      gorm.DeletedAt
	}
	SuiteKeyless struct {
		A, B string
	}
	SuiteKeylessCaptured struct {
		A, B string
	}
)

func (SuiteKeylessCaptured) ChangeCapture() envelope.Options { return envelope.Options{} }

// A join model without primaryKey tags, given to db.SetupJoinTable, is
// captured keyed by its foreign-key columns (Capture rejected it, and
// CaptureAll failed its writes). GORM's TestOverrideJoinTable,
// TestScanToEmbedded. A model without any key is an ErrConfiguration from
// Capture or db.Use when declared, and left uncaptured by CaptureAll
// (TestCreateWithNoGORMPrimaryKey, TestBelongsToDefaultValue).
func TestJoinModelWithoutPrimaryKey(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		for _, how := range []string{"CaptureAll", "Capture"} {
			t.Run(how, func(t *testing.T) {
				var e *env
				if how == "CaptureAll" {
					e = captureAllEnv(t, d, envelope.BeforeAndAfter, nil)
					// SetupJoinTable after db.Use, as GORM's docs do it.
					must(t, e.db.SetupJoinTable(&SuitePerson{}, "Addresses", &SuitePersonAddress{}))
				} else {
					e = newEnv(t, d, nil, gormcapture.Config{})
					// Capture refuses a model without a key: SetupJoinTable first.
					err := e.plugin.Capture(&SuiteKeyless{}, envelope.Options{})
					if !errors.Is(err, envelope.ErrConfiguration) {
						t.Fatalf("Capture of a keyless model: %v, want ErrConfiguration", err)
					}
					must(t, e.db.SetupJoinTable(&SuitePerson{}, "Addresses", &SuitePersonAddress{}))
					must(t, e.plugin.Capture(&SuitePersonAddress{}, envelope.Options{Payload: envelope.BeforeAndAfter}))
				}
				must(t, e.db.AutoMigrate(&SuitePerson{}, &SuiteAddress{}))
				p := SuitePerson{Name: "p", Addresses: []SuiteAddress{{Name: "a1"}, {Name: "a2"}}}
				must(t, e.db.Create(&p).Error)
				must(t, e.db.Model(&p).Association("Addresses").Delete(&p.Addresses[0])) // soft delete
				a3 := SuiteAddress{Name: "a3"}
				must(t, e.db.Create(&a3).Error)
				must(t, e.db.Create(&SuitePersonAddress{SuitePersonID: p.ID, SuiteAddressID: int(a3.ID)}).Error)
				var join []event
				for _, ev := range e.events(t) {
					if strings.HasPrefix(ev.Topic, "suite_person_address.") {
						join = append(join, ev)
					}
				}
				wantLines(t, join,
					"suite_person_address.inserted suite_address_id=1,suite_person_id=1",
					"suite_person_address.inserted suite_address_id=2,suite_person_id=1",
					"suite_person_address.updated suite_address_id=1,suite_person_id=1 [deleted_at]",
					"suite_person_address.inserted suite_address_id=3,suite_person_id=1")
				for _, ev := range join {
					if ev.Topic == "suite_person_address.updated" {
						b, _ := ev.Payload["before"].(map[string]any)
						a, _ := ev.Payload["after"].(map[string]any)
						if b == nil || b["deleted_at"] != nil || a == nil || a["deleted_at"] == nil {
							t.Errorf("soft delete images: before %v after %v", b, a)
						}
					}
				}
			})
		}
		t.Run("SetupJoinTable after a first write", func(t *testing.T) {
			e := captureAllEnv(t, d, envelope.After, nil, &SuitePerson{}, &SuiteAddress{}, &SuitePersonAddress{})
			p := SuitePerson{Name: "p"}
			must(t, e.db.Create(&p).Error)
			as := []SuiteAddress{{Name: "a1"}, {Name: "a2"}}
			must(t, e.db.Create(&as).Error)
			clearEvents(t, e)
			must(t, e.db.Create(&SuitePersonAddress{SuitePersonID: p.ID, SuiteAddressID: int(as[0].ID)}).Error) // keyless yet
			must(t, e.db.SetupJoinTable(&SuitePerson{}, "Addresses", &SuitePersonAddress{}))
			must(t, e.db.Create(&SuitePersonAddress{SuitePersonID: p.ID, SuiteAddressID: int(as[1].ID)}).Error)
			wantLines(t, e.events(t), "suite_person_address.inserted suite_address_id=2,suite_person_id=1")
		})
		t.Run("keyless", func(t *testing.T) {
			e := captureAllEnv(t, d, envelope.After, nil, &SuiteKeyless{})
			must(t, e.db.Create(&SuiteKeyless{A: "a", B: "b"}).Error) // uncaptured, not refused
			if n := e.count(t); n != 0 {
				t.Errorf("%d events for a model without a key", n)
			}
			// Declared: refused at Capture (issue 23), never at its writes.
			e2 := newEnv(t, d, nil, gormcapture.Config{}, &SuiteKeyless{})
			err := e2.plugin.Capture(&SuiteKeyless{}, envelope.Options{})
			if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "SuiteKeyless") {
				t.Errorf("Capture of a keyless model: %v, want ErrConfiguration naming it", err)
			}
			// Captured before db.Use, or declaring Captured and listed: refused at db.Use.
			db, _ := openDB(t, d, nil)
			for _, m := range []any{&SuiteKeyless{}, &SuiteKeylessCaptured{}} {
				p := gormcapture.New(gormcapture.Config{Models: []any{m}})
				if _, ok := m.(*SuiteKeyless); ok {
					must(t, p.Capture(m, envelope.Options{}))
				}
				if err := db.Use(p); !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "SuiteKeyless") {
					t.Errorf("db.Use with keyless %T: %v, want ErrConfiguration naming it", m, err)
				}
			}
		})
	})
}

// ON UPDATE cascade plans belong to model types too (gormfix's ON UPDATE
// capture merged with per-type plans): with plans keyed by table name, an
// update of the second SuiteUMember's refer followed the first type's
// constraint and read suite_u_profiles.suite_u_member_id, a column the
// table no longer has. Each type's update follows its own constraints.
func TestTwoTypesOneTableUpdateCascade(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := captureAllEnv(t, d, envelope.BeforeAndAfter, nil)
		{
			type SuiteUProfile struct {
				ID             uint
				Name           string
				SuiteUMemberID uint
			}
			type SuiteUMember struct {
				ID            uint
				Refer         uint `gorm:"uniqueIndex"`
				Name          string
				SuiteUProfile SuiteUProfile `gorm:"constraint:OnUpdate:CASCADE,OnDelete:CASCADE;foreignKey:SuiteUMemberID;references:Refer"`
			}
			must(t, e.db.AutoMigrate(&SuiteUMember{}))
			must(t, e.db.AutoMigrate(&SuiteUProfile{}))
			m := SuiteUMember{Refer: 1, Name: "m", SuiteUProfile: SuiteUProfile{Name: "p"}}
			must(t, e.db.Create(&m).Error)
			clearEvents(t, e)
			// Not Model(&m): GORM would also upsert m's loaded profile.
			must(t, e.db.Model(&SuiteUMember{}).Where("id = ?", m.ID).Update("refer", 2).Error)
			wantLines(t, e.events(t), "suite_u_member.updated 1 [refer]", "suite_u_profile.updated 1 [suite_u_member_id]")
			must(t, e.db.Migrator().DropTable(&SuiteUProfile{}, &SuiteUMember{}))
		}
		{
			type SuiteUProfile struct {
				ID    uint
				Name  string
				Refer uint `gorm:"uniqueIndex"`
			}
			type SuiteUMember struct {
				ID              uint
				Name            string
				Refer           uint // referenced by nothing, this time
				SuiteUProfileID uint
				SuiteUProfile   SuiteUProfile `gorm:"constraint:OnUpdate:CASCADE,OnDelete:CASCADE;foreignKey:SuiteUProfileID;references:Refer"`
			}
			must(t, e.db.AutoMigrate(&SuiteUProfile{}, &SuiteUMember{}))
			m := SuiteUMember{Name: "m", SuiteUProfile: SuiteUProfile{Name: "p", Refer: 1}}
			must(t, e.db.Create(&m).Error)
			clearEvents(t, e)
			must(t, e.db.Model(&m.SuiteUProfile).Update("refer", 2).Error)
			evs := e.events(t)
			wantLines(t, evs, "suite_u_profile.updated 1 [refer]", "suite_u_member.updated 1 [suite_u_profile_id]")
			for _, ev := range evs {
				if ev.Topic != "suite_u_member.updated" {
					continue
				}
				b, _ := ev.Payload["before"].(map[string]any)
				a, _ := ev.Payload["after"].(map[string]any)
				if b["suite_u_profile_id"] != float64(1) || a["suite_u_profile_id"] != float64(2) {
					t.Errorf("member: before %v after %v", b, a)
				}
			}
			clearEvents(t, e)
			must(t, e.db.Model(&SuiteUMember{}).Where("id = ?", m.ID).Update("refer", 7).Error)
			wantLines(t, e.events(t), "suite_u_member.updated 1 [refer]")
		}
	})
}

// With PrepareStmt, the statements herald runs for an ON UPDATE cascade
// (the parents' lock, the children's reads before and after) go on the
// unwrapped connection like its other statements: the caller's cache
// holds what it holds without the plugin.
func TestUpdateCascadePrepareStmtCacheUntouched(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		work := func(db *gorm.DB) []int {
			ps := db.Session(&gorm.Session{PrepareStmt: true})
			cached := func() int { return len(ps.ConnPool.(*gorm.PreparedStmtDB).Stmts.Keys()) }
			must(t, ps.Create(&[]Genre{{Code: "sf", Name: "SF", Titles: []Title{{Name: "Dune"}}, Shelfs: []Stack{{}}}}).Error)
			out := []int{cached()}
			must(t, ps.Model(&Genre{}).Where("code = ?", "sf").Update("code", "scifi").Error)
			out = append(out, cached())
			must(t, ps.Transaction(func(tx *gorm.DB) error {
				return tx.Model(&Genre{}).Where("code = ?", "scifi").Update("code", "sf").Error
			}))
			return append(out, cached())
		}
		plain, _ := openDB(t, d, nil)
		must(t, plain.AutoMigrate(&Genre{}, &Title{}, &Stack{}))
		want := work(plain)
		e := captureAllEnv(t, d, envelope.BeforeAndAfter, nil, &Genre{}, &Title{}, &Stack{})
		got := work(e.db)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("cached statements after each write: %v, without the plugin %v", got, want)
		}
		var titles []string
		for _, ev := range e.events(t) {
			if ev.Topic == "title.updated" {
				titles = append(titles, fmt.Sprint(ev.Payload["after"].(map[string]any)["genre_code"]))
			}
		}
		if fmt.Sprint(titles) != "[scifi sf]" {
			t.Errorf("title events after genre_code: %v, want [scifi sf]", titles)
		}
	})
}
