package envelope

// SetMaxArrayRows makes WriteCapturedArrays split its INSERTs every n
// events, so that a test can make several chunks cheaply.
func SetMaxArrayRows(w *Writer, n int) { w.maxArrayRows = n }
