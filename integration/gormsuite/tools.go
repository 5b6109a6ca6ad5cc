//go:build gormsuite_deps

// The suite's own dependencies (it imports these), so that this module's
// go.mod and go.sum pin them: the suite is copied in, not committed.
package main

import (
	_ "github.com/google/uuid"
	_ "github.com/jinzhu/now"
	_ "github.com/lib/pq"
	_ "github.com/stretchr/testify/assert"
	_ "gorm.io/driver/gaussdb"
	_ "gorm.io/driver/mysql"
	_ "gorm.io/driver/postgres"
	_ "gorm.io/driver/sqlite"
	_ "gorm.io/driver/sqlserver"
	_ "gorm.io/gorm"
	_ "gorm.io/gorm/utils/tests"

	_ "github.com/heraldgo/herald/envelope"
	_ "github.com/heraldgo/herald/gormcapture"
)
