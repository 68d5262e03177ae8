package nodes_test

import (
	"strings"
	"testing"
)

// psQuotes are the characters PowerShell takes as a single quote: ' ‘ ’ ‚ ‛.
const psQuotes = "'\u2018\u2019\u201a\u201b"

// psSingleQuoted reads a PowerShell single-quoted string at the start of s the way
// PowerShell's tokenizer does: any of the five quote characters opens and closes it, and two
// in a row stand for the second one. It returns the string's value and what follows it.
func psSingleQuoted(s string) (value, rest string, ok bool) {
	r := []rune(s)
	if len(r) == 0 || !strings.ContainsRune(psQuotes, r[0]) {
		return "", s, false
	}
	var b strings.Builder
	for i := 1; i < len(r); i++ {
		if strings.ContainsRune(psQuotes, r[i]) {
			if i+1 < len(r) && strings.ContainsRune(psQuotes, r[i+1]) {
				b.WriteRune(r[i+1])
				i++
				continue
			}
			return b.String(), string(r[i+1:]), true
		}
		b.WriteRune(r[i])
	}
	return "", "", false // never closed
}

// TestWindowsJoinQuotesEveryPowerShellQuote: a runner's name lands in the PowerShell join
// command as one string whatever quote characters it holds — a ’ (U+2019, what phones and
// word processors type for an apostrophe) used to end the string and let the rest of the
// name run as PowerShell.
func TestWindowsJoinQuotesEveryPowerShellQuote(t *testing.T) {
	x := newHub(t)
	for _, name := range []string{
		"mac mini", "Bob's PC", "Bob’s PC", "x’; Remove-Item -Recurse C:\\ ; ’", "‘a’ ‚b‛ 'c'", "''’’", "$(whoami) `n", "ü✓’",
	} {
		c, err := x.h.Create(name, false, "http://192.0.2.10:8765")
		if err != nil {
			t.Fatalf("create %q: %v", name, err)
		}
		w := c.JoinCommands["windows"]
		_, tail, ok := strings.Cut(w, " --name ")
		if !ok {
			t.Fatalf("no --name in %q", w)
		}
		got, rest, ok := psSingleQuoted(tail)
		if !ok || got != name || rest != "" {
			t.Errorf("name %q: PowerShell reads --name as %q followed by %q (closed: %v) in %q", name, got, rest, ok, w)
		}
	}
}
