// Package pgform_test here holds internal/pgform's tests, which compare its
// array literals with lib/pq's: apart from internal/pgform so that a program
// that imports herald's core does not get lib/pq in its go.sum.
package pgform_test
