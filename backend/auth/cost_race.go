//go:build race

package auth

import "golang.org/x/crypto/bcrypt"

// Under the race detector (test builds only: no release is built with -race) bcrypt runs
// about 15 times slower — 2.5 s a hash at the default cost on the CI machine, where the
// concurrent core's tests log in hundreds of times. Its instrumented memory accesses are not
// what those tests check, so race builds hash at bcrypt's least cost; what a hash is, how a
// login compares it and the timing equaliser are the same code. TestReleaseHashCost (in the
// plain pass) checks the release cost.
const hashCost = bcrypt.MinCost

// dummyHash: as in cost.go, at hashCost.
var dummyHash = []byte("$2a$04$NTH/ViSOzV.R4phihTR7qefJY3E44aGl6F1Zk6r59FT5kKf2fFNM2")
