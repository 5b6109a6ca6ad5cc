module github.com/heraldgo/herald/integration/entexamples

go 1.26.0
