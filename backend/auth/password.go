package auth

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"cubicle/backend/fault"
)

// MinPasswordLen is the shortest password CheckPassword accepts.
const MinPasswordLen = 12

// commonWords are words that make up most guessed passwords; a password that is one of them
// with a few characters around it is refused.
var commonWords = []string{
	"password", "passwort", "passw0rd", "qwerty", "azerty", "qwertz", "123456", "654321", "abcdef", "letmein",
	"welcome", "admin", "administrator", "cubicle", "iloveyou", "monkey", "dragon", "football", "baseball",
	"master", "shadow", "sunshine", "princess", "secret", "changeme", "default", "login", "trustno1", "abc123",
	"111111", "000000", "123123", "asdfgh", "zxcvbn", "root", "toor", "test", "guest", "user",
}

// leet undoes the usual letter substitutions before looking for common words.
var leet = strings.NewReplacer("0", "o", "1", "i", "3", "e", "4", "a", "5", "s", "7", "t", "@", "a", "$", "s", "!", "i")

// CheckPassword returns a fault.ErrInvalid error saying what to change when password is too
// weak to be chosen for an account (username is the account's name): at least MinPasswordLen
// characters and at most 72 bytes; three kinds of characters (lower case, upper case, digits,
// others) unless it has 16 characters or more (a passphrase); not mostly one repeated or
// running sequence of characters; not the username or a common password with a few
// characters added.
func CheckPassword(password, username string) error {
	n := utf8.RuneCountInString(password)
	switch {
	case n < MinPasswordLen:
		return fault.Invalid("the password is too short: use at least %d characters (a few unrelated words work well)", MinPasswordLen)
	case len(password) > 72:
		return fault.Invalid("the password is too long: use at most 72 bytes")
	case strings.ContainsFunc(password, unicode.IsControl):
		return fault.Invalid("the password contains control characters")
	}
	var lower, upper, digit, other bool
	distinct := map[rune]bool{}
	for _, r := range password {
		distinct[r] = true
		switch {
		case unicode.IsLower(r):
			lower = true
		case unicode.IsUpper(r):
			upper = true
		case unicode.IsDigit(r):
			digit = true
		default:
			other = true
		}
	}
	kinds := 0
	for _, k := range []bool{lower, upper, digit, other} {
		if k {
			kinds++
		}
	}
	if kinds < 3 && n < 16 {
		return fault.Invalid("the password is too simple: mix upper and lower case letters, digits and other characters, or use 16 characters or more")
	}
	if len(distinct) < 6 || sequential(password) {
		return fault.Invalid("the password is too predictable (repeated or running characters)")
	}
	low := strings.ToLower(password)
	if u := strings.ToLower(strings.TrimSpace(username)); len(u) >= 3 && strings.Contains(low, u) {
		return fault.Invalid("the password must not contain the username")
	}
	for _, form := range []string{low, leet.Replace(low)} {
		rest, found := form, ""
		for _, w := range commonWords {
			if strings.Contains(rest, w) {
				rest, found = strings.ReplaceAll(rest, w, ""), w
			}
		}
		if found != "" && utf8.RuneCountInString(strings.Trim(rest, "-_.!@#$%^&*0123456789 ")) < 6 {
			return fault.Invalid("the password is too close to a common password (%q); choose something less guessable", found)
		}
	}
	return nil
}

// sequential reports whether most of s is one run of ascending or descending characters
// ("abcdefgh1234", "987654321xyz").
func sequential(s string) bool {
	rs := []rune(strings.ToLower(s))
	longest, run := 1, 1
	for i := 1; i < len(rs); i++ {
		d := rs[i] - rs[i-1]
		if d == 1 || d == -1 || d == 0 {
			run++
		} else {
			run = 1
		}
		longest = max(longest, run)
	}
	return longest*2 > len(rs)
}
