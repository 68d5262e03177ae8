package guard

import (
	"fmt"
	"strings"
	"unicode"
)

// isControl reports characters that have no business in a command: C0 controls other than
// tab and newline (so also carriage return and escape), DEL and the C1 controls.
func isControl(r rune) bool {
	return (r < 0x20 && r != '\t' && r != '\n') || (r >= 0x7f && r <= 0x9f)
}

func controlToNewline(r rune) rune {
	if isControl(r) {
		return '\n'
	}
	return r
}

func dropControl(r rune) rune {
	if isControl(r) {
		return -1
	}
	return r
}

// isInvisible reports unicode spaces other than the ASCII space, and format characters
// (zero-width spaces and joiners, bidi overrides, the BOM, soft hyphens).
func isInvisible(r rune) bool {
	if r < 0x80 {
		return false
	}
	return unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) || r == 0x180E || r == 0x3164 || r == 0xFFA0 || r == 0x115F || r == 0x1160
}

// confusables maps look-alike letters (Cyrillic, Greek) to the ASCII letters they imitate.
var confusables = map[rune]rune{
	'а': 'a', 'в': 'b', 'е': 'e', 'о': 'o', 'р': 'p', 'с': 'c', 'у': 'y', 'х': 'x', 'і': 'i', 'ј': 'j',
	'ѕ': 's', 'ԁ': 'd', 'һ': 'h', 'ӏ': 'l', 'ԛ': 'q', 'ԝ': 'w', 'м': 'm', 'т': 't', 'к': 'k', 'п': 'n',
	'А': 'A', 'В': 'B', 'Е': 'E', 'К': 'K', 'М': 'M', 'Н': 'H', 'О': 'O', 'Р': 'P', 'С': 'C', 'Т': 'T',
	'Х': 'X', 'І': 'I', 'Ј': 'J', 'Ѕ': 'S',
	'α': 'a', 'ο': 'o', 'ρ': 'p', 'ν': 'v', 'ι': 'i', 'κ': 'k', 'τ': 't', 'υ': 'u', 'χ': 'x', 'ε': 'e',
	'Α': 'A', 'Β': 'B', 'Ε': 'E', 'Ζ': 'Z', 'Η': 'H', 'Ι': 'I', 'Κ': 'K', 'Μ': 'M', 'Ν': 'N', 'Ο': 'O',
	'Ρ': 'P', 'Τ': 'T', 'Υ': 'Y', 'Χ': 'X',
	'‐': '-', '‑': '-', '‒': '-', '–': '-', '—': '-', '―': '-', '−': '-', '⁄': '/', '∕': '/', '／': '/',
	'ǀ': '|', '∣': '|', '；': ';', '＆': '&',
}

func confusable(r rune) (rune, bool) {
	if r >= 0xFF01 && r <= 0xFF5E { // fullwidth ASCII
		return r - 0xFEE0, true
	}
	a, ok := confusables[r]
	return a, ok
}

// textMatches flags control characters, invisible unicode and mixed-script words.
func textMatches(src string, kind scriptKind) []Match {
	var out []Match
	ctrl, invisible := -1, -1
	for i, r := range src {
		if ctrl < 0 && isControl(r) {
			ctrl = i
			out = append(out, Match{RuleID: "text.control-char", Family: FamilyControl, Severity: High,
				Reason:  fmt.Sprintf("contains the control character %U, which can hide or rewrite what is shown", r),
				Excerpt: excerpt(around(src, i))})
		}
		if invisible < 0 && isInvisible(r) {
			invisible = i
			out = append(out, Match{RuleID: "text.invisible-unicode", Family: FamilyUnicode, Severity: High,
				Reason:  fmt.Sprintf("contains the invisible or look-alike space %U, which hides what the command does", r),
				Excerpt: excerpt(around(src, i))})
		}
	}
	for _, word := range strings.Fields(src) {
		ascii, look := false, false
		for _, r := range word {
			switch {
			case r < 0x80 && unicode.IsLetter(r):
				ascii = true
			case r >= 0x80:
				if _, ok := confusable(r); ok {
					look = true
				}
			}
		}
		// A word of look-alikes only is suspicious too when it imitates punctuation (－rf).
		if look && (ascii || strings.ContainsAny(word, "-/|;&")) {
			out = append(out, Match{RuleID: "text.homoglyph", Family: FamilyUnicode, Severity: Medium,
				Reason: "mixes look-alike letters from another alphabet into a word", Excerpt: excerpt(word)})
			break
		}
	}
	return out
}

func around(s string, i int) string {
	lo, hi := max(0, i-40), min(len(s), i+40)
	for lo > 0 && !isRuneStart(s[lo]) {
		lo--
	}
	for hi < len(s) && !isRuneStart(s[hi]) {
		hi++
	}
	return strings.Map(func(r rune) rune {
		if isControl(r) || isInvisible(r) {
			return '·'
		}
		return r
	}, s[lo:hi])
}

// normalizeUnicode returns src with invisible characters removed or turned into spaces and
// look-alike letters replaced by ASCII, and whether that changed anything.
func normalizeUnicode(src string) (string, bool) {
	changed := false
	out := strings.Map(func(r rune) rune {
		if r < 0x80 {
			return r
		}
		if isInvisible(r) {
			changed = true
			if unicode.IsSpace(r) || r == 0x3164 || r == 0xFFA0 {
				return ' '
			}
			return -1
		}
		if a, ok := confusable(r); ok {
			changed = true
			return a
		}
		return r
	}, src)
	return out, changed
}
