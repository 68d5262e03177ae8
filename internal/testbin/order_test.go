package main

import (
	"slices"
	"testing"
)

// The machine's own times win; a package it has none for takes its seed time, and one in
// neither counts as short.
func TestLongestFirst(t *testing.T) {
	ps := []testPkg{{Path: "short"}, {Path: "measured"}, {Path: "seeded"}, {Path: "unknown"}, {Path: "long-seeded"}}
	last := map[string]float64{"measured": 30, "short": 1}
	seed := map[string]float64{"measured": 900, "seeded": 60, "long-seeded": 400}
	longestFirst(ps, last, seed)
	var got []string
	for _, p := range ps {
		got = append(got, p.Path)
	}
	if want := []string{"long-seeded", "seeded", "measured", "short", "unknown"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// The committed seed parses, has both passes, and knows the suite's long binaries.
func TestSeedDurations(t *testing.T) {
	plain, race := seedFor(false), seedFor(true)
	if len(plain) < 20 || len(race) < 10 {
		t.Fatalf("seed has %d plain and %d race packages", len(plain), len(race))
	}
	for p, d := range plain {
		if d < 0 {
			t.Errorf("%s is seeded at %v s", p, d)
		}
	}
	for _, long := range []string{"cubicle/backend", "cubicle/backend/vm"} {
		if plain[long] < 60 {
			t.Errorf("%s is seeded at %.0f s, want its time in a whole run", long, plain[long])
		}
	}
}
