// Package jsonform_test here holds jsonform's tests, examples and fuzz
// target. They use shopspring/decimal and pgx's pgtype, which jsonform
// itself does not import; apart from jsonform/ so that a program importing
// jsonform (every program importing a capture package does) does not get
// those modules in its go.sum (go mod tidy keeps checksums for what the
// tests of a program's dependencies import).
package jsonform_test
