package gormcapture

import (
	"regexp"
	"strconv"

	"gorm.io/gorm/schema"
)

// decimalTypeRE matches a decimal column type with a scale:
// numeric(10,2), DECIMAL(12, 4).
var (
	decimalTypeRE = regexp.MustCompile(`(?i)^\s*(numeric|decimal)\s*\(\s*\d+\s*,\s*(\d+)\s*\)`)
	decimalRE     = regexp.MustCompile(`(?i)^\s*(numeric|decimal)\s*$`)
)

// declaredScale returns the scale a field's column is declared with —
// `gorm:"type:numeric(10,2)"`, or `gorm:"precision:10;scale:2"` on a
// decimal type — so that its captured values keep it on every database
// (SQLite stores 12.50 as 12.5).
func declaredScale(f *schema.Field) (int, bool) {
	if m := decimalTypeRE.FindStringSubmatch(string(f.DataType)); m != nil {
		n, err := strconv.Atoi(m[2])
		return n, err == nil
	}
	if f.Scale > 0 && decimalRE.MatchString(string(f.DataType)) {
		return f.Scale, true
	}
	return 0, false
}
