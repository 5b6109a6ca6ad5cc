package main

import (
	_ "github.com/ThreeDotsLabs/watermill"
	_ "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	_ "github.com/heraldgo/herald/relay"
	_ "github.com/riverqueue/river"
	_ "github.com/riverqueue/river/riverdriver/riverpgxv5"
)

func main() {}
