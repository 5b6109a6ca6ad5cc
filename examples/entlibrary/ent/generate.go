package ent

//go:generate go run entc.go
