package envelope

// SetMaxArrayRows makes WriteCapturedArrays split its INSERTs every n
// events, so that a test can make several chunks cheaply.
func SetMaxArrayRows(w *Writer, n int) { w.maxArrayRows = n }

// SkipMySQLKeyLocks makes a MySQL writer insert without locking its keys'
// bucket rows: what TestMySQLSharedKeyCommitOrder must see fail.
func SkipMySQLKeyLocks(w *Writer) { w.noKeyLocks = true }

// MySQLKeyBucket is the key-lock bucket of an ordering key on MySQL.
func MySQLKeyBucket(key string) int { return mysqlKeyBucket(key) }

// TrustedJSONForTest is a payload written as its bytes, as Spec.Messages's are.
func TrustedJSONForTest(s string) any { return trustedJSON(s) }

// The template parser, for TestTemplateRender and TestTemplateErrors.
type TemplateVars = templateVars

var ParseTemplate = parseTemplate
