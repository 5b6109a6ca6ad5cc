module github.com/heraldgo/herald/integration/entexamples

go 1.26.0

require github.com/heraldgo/herald/integration/entsuite v0.0.0

// The oracle's glue parser (standard library only); the harness's work
// module points at the same directories.
replace (
	github.com/heraldgo/herald => ../..
	github.com/heraldgo/herald/integration/entsuite => ../entsuite
)
