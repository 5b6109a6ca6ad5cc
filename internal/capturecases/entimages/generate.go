// Package entimages holds ent schemas whose shapes test what entcapture's
// images and metadata say: a UUID edge field that is optional but not
// Nillable, a database default (entsql.Default), a timestamptz(3)
// column, a composite unique key an upsert targets, and schema hooks that
// set a column or narrow an update (a tenant-style WhereP). Its client
// (ent/) is generated with entcapturegen.Extension(); entcapture's tests use it.
package entimages

//go:generate go run entc.go
