package tools

import (
	"bytes"
	"fmt"
	"strings"

	"cubicle/backend/fault"
)

// An edit of a text file in place, asked of computer_write_file / host_write_file instead of
// whole content: {old_str, new_str} replaces the one occurrence of old_str, {insert_line,
// text} inserts text after that line (0 = at the top). Native editor tools (Anthropic's
// str_replace_based_edit_tool: str_replace, insert) map onto it, so an edit is judged by the
// guard and the file guard as the write it is.

// isEdit reports whether a write's arguments ask for an edit rather than whole content.
func isEdit(a args) bool {
	_, replace := a["old_str"]
	_, insert := a["insert_line"]
	return replace || insert
}

// edit applies the edit a asks for to the file's current data and says what it did.
func edit(path string, data []byte, a args) ([]byte, string, error) {
	if bytes.IndexByte(data, 0) >= 0 {
		return nil, "", fault.Invalid("%s is a binary file: edits are for text; write its whole content instead", path)
	}
	text := string(data)
	if _, ok := a["old_str"]; ok {
		old, ok := a["old_str"].(string)
		if !ok || old == "" {
			return nil, "", fault.Invalid(`argument "old_str" must be the non-empty text to replace`)
		}
		repl, ok := a["new_str"].(string)
		if _, given := a["new_str"]; given && !ok {
			return nil, "", fault.Invalid(`argument "new_str" must be text`)
		}
		switch n := strings.Count(text, old); n {
		case 0:
			return nil, "", fault.Invalid("old_str was not found in %s: view the file and copy the text exactly (whitespace included)", path)
		case 1:
		default:
			return nil, "", fault.Invalid("old_str occurs %d times in %s: include more of the surrounding lines so it matches once", n, path)
		}
		i := strings.Index(text, old)
		line := strings.Count(text[:i], "\n") + 1
		out := text[:i] + repl + text[i+len(old):]
		if len(out) > MaxFile {
			return nil, "", fault.Invalid("the edited file would be %d bytes, over the limit of %d", len(out), MaxFile)
		}
		return []byte(out), fmt.Sprintf("Replaced the text at line %d of %s.", line, path), nil
	}
	n, ok := a.int("insert_line")
	if !ok || n < 0 {
		return nil, "", fault.Invalid(`argument "insert_line" must be a line number ≥ 0 (0 = at the top)`)
	}
	ins, ok := a["text"].(string)
	if !ok {
		return nil, "", fault.Invalid(`argument "text" (the lines to insert) is required with insert_line`)
	}
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if n > len(lines) {
		return nil, "", fault.Invalid("insert_line %d is past the end of %s (%d lines)", n, path, len(lines))
	}
	if n > 0 && !strings.HasSuffix(lines[n-1], "\n") {
		lines[n-1] += "\n" // inserting after a last line without its newline
	}
	if !strings.HasSuffix(ins, "\n") {
		ins += "\n"
	}
	out := strings.Join(lines[:n], "") + ins + strings.Join(lines[n:], "")
	if len(out) > MaxFile {
		return nil, "", fault.Invalid("the edited file would be %d bytes, over the limit of %d", len(out), MaxFile)
	}
	return []byte(out), fmt.Sprintf("Inserted %d line(s) after line %d of %s.", strings.Count(ins, "\n"), n, path), nil
}
