package guard

import (
	"regexp"
	"strings"
)

// In-place edits: programs that rewrite the files they are given (perl -i, ruby -i, awk -i
// inplace, ed, ex and vim scripts that write, patch, sponge, crudini, augtool, sd) and
// program text that writes, copies or moves onto a path (pathlib's write_text, fileinput
// with inplace=True, shutil.copy, os.rename, fs.writeFileSync, perl's open with a mode).
// Each target meets writeTarget, as a redirection onto it would.

var (
	// vimWrite finds an ex command that writes the buffer.
	vimWrite = regexp.MustCompile(`(?:^|[|:\s])(?:w|wq|x|xit|wa|wqa|xa|xall|wall|up|update|sav|saveas|write|exit|wn|wnext)(?:!|\s|$|\|)`)
	// copyCall finds calls whose second argument is the path written: copies, moves, links.
	copyCall = regexp.MustCompile(`(?:\bshutil\.(?:copy|copy2|copyfile|move|copytree)|\bos\.(?:rename|replace|link|symlink)|\.(?:copyFileSync|copyFile|renameSync|rename|symlinkSync|linkSync|cpSync)|\bFileUtils\.(?:cp|cp_r|mv|ln|ln_s|ln_sf|install|copy|move)|\bFile\.(?:rename|symlink|link)|\b(?:copy|rename|symlink|link)|\bDeno\.(?:copyFile|rename|writeTextFile|writeFile)(?:Sync)?)\s*\(`)
	// receiverWrite finds a write through a path object: Path('/etc/x').write_text(…).
	receiverWrite = regexp.MustCompile(`\.(?:write_text|write_bytes|touch|symlink_to|hardlink_to)\s*\(|\.open\s*\(\s*['"][wax+]`)
	// fileInput finds python's fileinput rewriting files in place.
	fileInput = regexp.MustCompile(`fileinput\.(?:input|FileInput)\s*\(`)
	// perlOpen finds perl's open without parentheses: open my $f, ">", "/etc/x".
	perlOpen = regexp.MustCompile(`\bopen\s*\(?\s*(?:my\s+)?[\$\w]+\s*,`)
	// extractCall finds archive extraction in program text; the path is the destination.
	extractCall = regexp.MustCompile(`\.(?:extractall|extract)\s*\(|\bunpack_archive\s*\(`)
)

// inPlace applies writeTarget to the files an in-place editor rewrites.
func (s *scope) inPlace(name string, args []string, ex string) {
	verb := name + " edits"
	switch name {
	case "perl", "ruby":
		inplace := false
		var files []string
		code := false
		for i := 0; i < len(args); i++ {
			a := args[i]
			switch {
			case a == "--":
				files = append(files, args[i+1:]...)
				i = len(args)
			case a == "-e" || a == "-E":
				code = true
				i++
			case strings.HasPrefix(a, "-M") || strings.HasPrefix(a, "-m") || strings.HasPrefix(a, "-I") || strings.HasPrefix(a, "-r"):
				if len(a) == 2 {
					i++
				}
			case len(a) > 1 && a[0] == '-':
				flags := a[1:]
				if j := strings.IndexAny(flags, "eE"); j >= 0 {
					flags = flags[:j]
					code = true
					if j == len(a[1:])-1 {
						i++ // -pie 'code': the code follows
					}
				}
				if strings.ContainsRune(flags, 'i') {
					inplace = true
				}
			default:
				files = append(files, a)
			}
		}
		if !inplace {
			return
		}
		if !code && len(files) > 0 {
			files = files[1:] // the first operand is the program
		}
		for _, f := range files {
			s.writeTarget(f, verb, ex)
		}
	case "awk", "gawk":
		inplace := false
		for i, a := range args {
			if (a == "-i" || a == "--include") && i+1 < len(args) && strings.TrimSuffix(args[i+1], ".awk") == "inplace" ||
				a == "-iinplace" || a == "--include=inplace" {
				inplace = true
			}
		}
		if !inplace {
			return
		}
		ops := operands(skipValues(args, "-i", "--include", "-f", "--file", "-v", "--assign", "-F", "--field-separator"))
		if len(ops) > 1 && !hasAny(args, "-f", "--file") {
			ops = ops[1:]
		}
		for _, f := range ops {
			if !strings.Contains(f, "=") {
				s.writeTarget(f, verb, ex)
			}
		}
	case "ed", "red":
		for _, f := range operands(args) {
			s.writeTarget(f, verb, ex)
		}
	case "ex", "vim", "vi", "nvim", "view":
		writes := false
		rest := make([]string, 0, len(args))
		for i := 0; i < len(args); i++ {
			a := args[i]
			cmd := ""
			switch {
			case (a == "-c" || a == "--cmd" || a == "-S" || len(a) > 2 && a[0] == '-' && a[1] != '-' && strings.HasSuffix(a, "c")) && i+1 < len(args):
				cmd = args[i+1]
				i++
			case strings.HasPrefix(a, "+"):
				cmd = a[1:]
			default:
				rest = append(rest, a)
			}
			writes = writes || vimWrite.MatchString(cmd)
		}
		if !writes {
			return
		}
		for _, f := range operands(rest) {
			s.writeTarget(f, verb, ex)
		}
	case "patch":
		ops := operands(skipValues(args, "-i", "--input", "-o", "--output", "-p", "-B", "-V", "-z", "-r", "-D", "-F", "-g"))
		for i, a := range args {
			if (a == "-d" || a == "--directory") && i+1 < len(args) {
				s.writeTarget(args[i+1], verb+" files under", ex)
			} else if v, ok := strings.CutPrefix(a, "--directory="); ok {
				s.writeTarget(v, verb+" files under", ex)
			} else if len(a) > 2 && strings.HasPrefix(a, "-d") {
				s.writeTarget(a[2:], verb+" files under", ex)
			}
		}
		if len(ops) > 0 {
			s.writeTarget(ops[0], verb, ex)
		}
	case "sponge":
		for _, f := range operands(args) {
			s.writeTarget(f, verb, ex)
		}
	case "crudini":
		if hasAny(args, "--set", "--del", "--merge") {
			for _, a := range args {
				if strings.HasPrefix(a, "/") {
					s.writeTarget(a, verb, ex)
					break
				}
			}
		}
	case "augtool":
		for _, a := range args {
			if p, ok := strings.CutPrefix(a, "/files/"); ok {
				s.writeTarget("/"+p, verb, ex)
			}
		}
	case "sd":
		if ops := operands(args); len(ops) > 2 {
			for _, f := range ops[2:] {
				s.writeTarget(f, verb, ex)
			}
		}
	}
}

// skipValues drops the options in opts together with their values.
func skipValues(args []string, opts ...string) []string {
	o := set(opts...)
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if o[args[i]] {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// codeWrites judges the paths program text writes, copies or moves onto, and the
// directories it extracts archives into.
func (s *scope) codeWrites(code, ex string) {
	verb := "the program writes"
	for _, loc := range copyCall.FindAllStringIndex(code, 8) {
		if lits := literals(callArgs(code, loc[1])); len(lits) >= 2 {
			s.writeTarget(s.codePath(lits[1], ""), verb, ex)
		}
	}
	for _, loc := range receiverWrite.FindAllStringIndex(code, 8) {
		if p := receiverPath(code[:loc[0]]); p != "" {
			s.writeTarget(p, verb, ex)
		}
	}
	if strings.Contains(code, "inplace") {
		for _, loc := range fileInput.FindAllStringIndex(code, 4) {
			for _, l := range literals(callArgs(code, loc[1])) {
				if strings.Contains(l, "/") {
					s.writeTarget(l, verb, ex)
				}
			}
		}
	}
	// fs.writeFileSync and friends reached through require('fs').
	for _, m := range nodeWrite.FindAllStringSubmatchIndex(code, 8) {
		if lits := literals(callArgs(code, m[1])); len(lits) > 0 {
			s.writeTarget(lits[0], verb, ex)
		}
	}
	// perl's open: a mode of its own (">", ">>", "+<") or the mode before the path.
	for _, loc := range perlOpen.FindAllStringIndex(code, 8) {
		end := loc[1] + 200
		if end > len(code) {
			end = len(code)
		}
		rest := code[loc[1]:end]
		if i := strings.IndexAny(rest, ";)\n"); i >= 0 {
			rest = rest[:i]
		}
		lits := literals(rest)
		for i, l := range lits {
			t := strings.TrimSpace(l)
			mode := strings.TrimLeft(t, "+<>|&= ")
			if len(mode) == len(t) || !strings.ContainsAny(t[:len(t)-len(mode)], ">+") {
				continue
			}
			if mode == "" && i+1 < len(lits) {
				mode = lits[i+1]
			}
			if mode != "" {
				s.writeTarget(strings.TrimSpace(mode), verb, ex)
			}
			break
		}
	}
	for _, loc := range extractCall.FindAllStringIndex(code, 4) {
		lits := literals(callArgs(code, loc[1]))
		if strings.Contains(code[loc[0]:loc[1]], "unpack_archive") {
			if len(lits) > 1 {
				s.extractInto(lits[1], "the program", ex)
			}
			continue
		}
		for _, l := range lits {
			if strings.HasPrefix(l, "/") || strings.HasPrefix(l, "~") {
				s.extractInto(l, "the program", ex)
				break
			}
		}
	}
}

// nodeWrite finds node's fs writes however fs was reached (require('fs').writeFileSync).
var nodeWrite = regexp.MustCompile(`\.(writeFileSync|appendFileSync|writeFile|appendFile|createWriteStream)\s*\(`)
