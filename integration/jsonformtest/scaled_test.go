package jsonform_test

import (
	"math/big"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/heraldgo/herald/jsonform"
)

// TestAppendScaled: a decimal column's declared scale pads every decimal
// form with fewer fractional digits; a value is never changed (more digits
// stay), and other forms are left as Append writes them.
func TestAppendScaled(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in    any
		scale int
		want  string
	}{
		{decimal.RequireFromString("12.5"), 2, `"12.50"`},
		{decimal.Zero, 2, `"0.00"`},
		{decimal.RequireFromString("-7"), 2, `"-7.00"`},
		{decimal.RequireFromString("1.005"), 2, `"1.005"`}, // more digits: as it is
		{decimal.RequireFromString("123.456"), 0, `"123.456"`},
		{decimal.New(15, 3), 1, `"15000.0"`},
		{decimal.NullDecimal{}, 2, `null`},
		{decimal.NullDecimal{Decimal: decimal.RequireFromString("2"), Valid: true}, 1, `"2.0"`},
		{big.NewRat(1, 8), 2, `"0.125"`},
		{big.NewRat(1, 2), 2, `"0.50"`},
		{big.NewRat(1, 3), 2, `"1/3"`}, // no exact decimal text: as Append writes it
		{pgtype.Numeric{Int: big.NewInt(125), Exp: -1, Valid: true}, 2, `"12.50"`},
		{12.5, 2, `12.5`}, // a float field: a number, as Append writes it
		{int64(3), 2, `3`},
		{"abc", 2, `"abc"`},
		{nil, 2, `null`},
	}
	for _, c := range cases {
		got, err := jsonform.AppendScaled(nil, "fee", c.in, c.scale)
		if err != nil {
			t.Errorf("%#v: %v", c.in, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%#v scale %d: %s, want %s", c.in, c.scale, got, c.want)
		}
	}
	// It appends.
	got, _ := jsonform.AppendScaled([]byte(`{"a":`), "a", decimal.RequireFromString("1"), 3)
	if string(got) != `{"a":"1.000"` {
		t.Errorf("append: %s", got)
	}
}
