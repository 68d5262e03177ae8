package backend

import (
	"testing"

	"golang.org/x/crypto/bcrypt"

	"cubicle/backend/auth"
)

// TestReleaseHashCost: the auth package is tested only under the race detector, whose builds
// hash at bcrypt's least cost (backend/auth/cost_race.go); this package is built as releases
// are, so here a new password hash has bcrypt's default cost and logs in.
func TestReleaseHashCost(t *testing.T) {
	h, err := auth.HashPassword("a password of ours")
	if err != nil {
		t.Fatal(err)
	}
	if cost, err := bcrypt.Cost([]byte(h)); err != nil || cost != bcrypt.DefaultCost {
		t.Fatalf("a release build's hash cost %d (%v), want %d", cost, err, bcrypt.DefaultCost)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(h), []byte("a password of ours")); err != nil {
		t.Fatal(err)
	}
}
