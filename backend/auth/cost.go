//go:build !race

package auth

import "golang.org/x/crypto/bcrypt"

// hashCost is bcrypt's work factor for new password hashes.
const hashCost = bcrypt.DefaultCost

// dummyHash is compared against when the username is unknown, so that a wrong username and a
// wrong password take the same time. It is the bcrypt hash (hashCost) of a public phrase,
// written out: computing it when the package loads cost every start of the program a bcrypt
// run (a quarter second on a busy machine, issue 31). TestDummyHash checks it.
var dummyHash = []byte("$2a$10$WKYsIop80.2I9bM/Zd21Kev.ZHRQwsebHfe6y5EiKhCGflYSAHycq")
