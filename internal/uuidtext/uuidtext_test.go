package uuidtext

import (
	"testing"

	"github.com/google/uuid"
)

func TestAppendIsString(t *testing.T) {
	for _, u := range []uuid.UUID{{}, uuid.Max, uuid.MustParse("0199ab4e-6d2f-7c3a-9e1b-fe0123456789"), uuid.New()} {
		if got := string(Append([]byte("x"), u)); got != "x"+u.String() {
			t.Errorf("Append(%s) = %q", u, got)
		}
	}
}
