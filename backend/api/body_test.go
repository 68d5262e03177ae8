package api

import (
	"strings"
	"testing"
)

// TestCheckJSON: the body check refuses what it must and nothing a real client sends.
func TestCheckJSON(t *testing.T) {
	for _, c := range []struct {
		body string
		ok   bool
	}{
		{`{}`, true},
		{` {"name":"a"} `, true},
		{`{"a":[{"k":1},{"k":2}],"b":{"k":1},"k":{"a":{"a":1}}}`, true},
		{`{"a":[[],[{}],{"x":[1,"x",null]}],"b":"a","c":"b"}`, true},
		{`{"a":"k","k":"a"}`, true}, // a value equal to a key is no key
		{`{"a":1,"a":2}`, false},
		{`{"name":"a","n\u0061me":"b"}`, false},
		{`{"a":{"x":1,"y":{"z":1,"z":2}}}`, false},
		{`{"a":[{"k":1,"k":1}]}`, false},
		{`{"a":1}{"a":1}`, false},
		{`{"a":1} x`, false},
		{`[{"a":1}]`, false},
		{`"a"`, false},
		{`null`, false},
		{`{"a":`, false},
		{strings.Repeat("[", 20000) + strings.Repeat("]", 20000), false},
	} {
		err := checkJSON([]byte(c.body))
		if (err == nil) != c.ok {
			t.Errorf("checkJSON(%.60q) = %v; want ok=%v", c.body, err, c.ok)
		}
	}
}
