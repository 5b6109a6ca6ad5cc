package glueparse

import (
	"reflect"
	"testing"
)

func TestJoinTables(t *testing.T) {
	glue := []byte("var heraldUserSchema = &entcapture.Schema{\n\tName: \"User\",\n\tTable: user.Table,\n}\n\n" +
		"// heraldJoinUserGroupsSchema describes the join table user_groups to entcapture.\n" +
		"var heraldJoinUserGroupsSchema = &entcapturert.Schema{\n\tName:    \"user_groups\",\n\tTable:   \"user_groups\",\n\tColumns: []string{\"user_id\", \"group_id\"},\n}\n")
	if got, want := JoinTables(glue), map[string]string{"user_groups": "user_groups"}; !reflect.DeepEqual(got, want) {
		t.Errorf("JoinTables = %v, want %v", got, want)
	}
}
