package guard

import (
	"encoding/base64"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Programs for python, perl, ruby, node, php and lua are not parsed as the languages they
// are; they are read for what matters here: commands they run (string and list forms),
// files they delete or write, payloads they decode and run, sockets wired to a shell, the
// environment or secret files sent to the network, and the paths they name (for the file
// guard). A delete maps onto the equivalent rm, so it meets the same rules:
// shutil.rmtree('build') is as harmless as rm -rf build, shutil.rmtree(Path.home()) as
// dangerous as rm -rf ~.

var (
	// execCall finds calls that run a command; its group 1 is the function.
	execCall = regexp.MustCompile(`(?:\bos\.(?:system|popen|exec[lv]p?e?|spawn[lv]p?e?)|\bsubprocess\.(?:run|call|check_call|check_output|Popen|getoutput|getstatusoutput)|\bcommands\.getoutput|\bpty\.spawn|\b(?:child_process|cp|require\(\s*['"]child_process['"]\s*\))\s*\.\s*(?:execSync|exec|spawnSync|spawn|execFileSync|execFile|fork)|\b(?:execSync|spawnSync|execFileSync|execFile|spawn)|\bIO\.popen|\bOpen3\.\w+|\bKernel\.(?:system|exec|spawn)|\bos\.execute|\bio\.popen|\b(?:system|exec|shell_exec|passthru|popen|proc_open|pcntl_exec)|\bRuntime\.getRuntime\(\)\.exec|\bDeno\.(?:run|Command))\s*\(`)
	// deleteCall finds calls that delete files; group 1 is the function.
	deleteCall = regexp.MustCompile(`(\bshutil\.rmtree|\bos\.(?:remove|unlink|rmdir|removedirs)|\.unlink|\.rmdir|\.(?:rmSync|rmdirSync|unlinkSync|rm)|\bfs(?:\.promises)?\.(?:rmSync|rmdirSync|unlinkSync|rm|rmdir|unlink)|\bfse?\.(?:removeSync|remove|emptyDirSync|emptyDir)|\brimraf(?:\.sync)?|\bdel(?:\.sync)?|\bFileUtils\.(?:rm_rf|rm_r|rm_f|rm|remove_dir|remove_entry|remove_entry_secure|rmtree|remove)|\bFile\.(?:delete|unlink)|\bDir\.(?:rmdir|delete|unlink)|\b(?:rmtree|remove_tree|unlink|rmdir)|\bos\.remove|\bDeno\.remove(?:Sync)?)\s*\(`)
	// writeCall finds calls that write a file named by their first argument.
	writeCall  = regexp.MustCompile(`(\bopen|\bfs\.(?:writeFileSync|appendFileSync|writeFile|appendFile|createWriteStream)|\bFile\.(?:write|open)|\bIO\.write|\.write_(?:text|bytes)|\bfile_put_contents|\bfopen|\bio\.open)\s*\(`)
	decodeExec = regexp.MustCompile(`(?s)(?:\bexec|\beval|\bcompile|\bFunction|\bvm\.runIn\w+|\binstance_eval|\bclass_eval|\bassert)\s*\(.{0,200}?(?:b64decode|b32decode|a85decode|fromhex|unhexlify|decodebytes|decompress|codecs\.decode|marshal\.loads|Buffer\.from|atob|decode64|unpack1?|decode_base64|base64_decode|gzinflate|gzuncompress|str_rot13|hex2bin|pack\s*\(\s*['"]H)`)
	homeExpr   = regexp.MustCompile(`os\.path\.expanduser\(\s*['"]~['"]\s*\)|Path\.home\(\)|os\.environ\s*\[\s*['"]HOME['"]\s*\]|os\.environ\.get\(\s*['"]HOME['"][^)]*\)|os\.getenv\(\s*['"]HOME['"][^)]*\)|process\.env\.HOME|process\.env\[\s*['"]HOME['"]\s*\]|os\.homedir\(\)|\.homedir\(\)|ENV\[\s*['"]HOME['"]\s*\]|\$ENV\{\s*['"]?HOME['"]?\s*\}|Dir\.home|getenv\(\s*['"]HOME['"]\s*\)|expanduser\(\s*['"]~['"]\s*\)`)
	envDump    = regexp.MustCompile(`dict\(\s*os\.environ\s*\)|os\.environ\.copy\(\)|json\.dumps\(\s*(?:dict\()?os\.environ|str\(\s*os\.environ\s*\)|repr\(\s*os\.environ|JSON\.stringify\(\s*process\.env\s*\)|\{\s*\.\.\.process\.env\s*\}|ENV\.to_h|ENV\.to_hash|%ENV\b|Deno\.env\.toObject|getenv\(\s*\)|\bos\.environ\s*[,)]`)
	netCode    = regexp.MustCompile(`\b(?:requests\.|urllib|http\.client|httplib|socket\.|fetch\s*\(|axios|https?\.request|https?\.get|Net::HTTP|LWP::|HTTP::Tiny|IO::Socket|curl_exec|fsockopen|file_get_contents\(\s*['"]https?:|smtplib|ftplib|aiohttp|httpx|websocket)`)
	b64Lit     = regexp.MustCompile(`['"]([A-Za-z0-9+/=_-]{8,})['"]`)
	backticks  = regexp.MustCompile("`([^`]+)`|%x\\{([^}]*)\\}|qx\\{([^}]*)\\}|qx\\(([^)]*)\\)")
	secretCode = regexp.MustCompile(`\.ssh|\.aws|\.kube|\.netrc|\.docker|\.gnupg|credentials`)
	kwargsOnly = regexp.MustCompile(`^[\s,\[\]{}()]*(?:(?:shell|check|capture_output|text|stdout|stderr|env|cwd|encoding|universal_newlines|stdio|timeout)\s*[:=][^,\])}]*[\s,\[\]{}()]*)*$`)
	joinCall   = regexp.MustCompile(`^(?:Path|pathlib\.Path|os\.path\.join|path\.join|File\.join|path\.resolve)\s*\(`)
	pathRecv   = regexp.MustCompile(`(?:Path|pathlib\.Path)\s*\(([^()]*(?:\([^()]*\))?[^()]*)\)\s*$`)
	hexLit     = regexp.MustCompile(`['"]((?:[0-9a-fA-F]{2}){4,})['"]`)
	// bareCall finds perl and ruby calls without parentheses: unlink "/x", system "cmd".
	bareCall = regexp.MustCompile(`\b(unlink|rmtree|remove_tree|rmdir|system|exec)\s+((?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")(?:\s*,\s*(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"))*)`)
	// tclExec finds Tcl's exec command; group 1 is the command line.
	tclExec = regexp.MustCompile(`(?m)(?:^|\[|;)[ \t]*exec[ \t]+([^\]\n;(][^\]\n;]*)`)
	// chrCall is a character spelled by its code; codeExec a call that runs a string as code.
	chrCall  = regexp.MustCompile(`\bchr\(\s*(\d{1,3})\s*\)`)
	codeExec = regexp.MustCompile(`\b(?:exec|eval)\s*\(`)
	// decodeFn finds a decoding call in the arguments of a call that runs a command.
	decodeFn       = regexp.MustCompile(`b64decode|b32decode|a85decode|fromhex|unhexlify|decodebytes|codecs\.decode|Buffer\.from|atob|decode64|unpack1?\b|decode_base64|base64_decode|hex2bin|str_rot13|pack\s*\(\s*['"]H`)
	codeSystemBare = regexp.MustCompile(`\bsystem\s*[\$"'(]|\bsystem\s+\w`)
	remoteCode     = regexp.MustCompile(`(?s)(?:\bexec|\beval|\bFunction|\binstance_eval)\s*\(.{0,200}?(?:urlopen|requests\.get|urllib|http\.client|fetch\s*\(|https?\.get|Net::HTTP|open-uri|URI\.open|LWP::Simple|file_get_contents\(\s*['"]https?:)`)
)

// interpreterCode analyses a program for an interpreter.
func (s *scope) interpreterCode(code, ex string) {
	if s.a.parses > maxParses || len(code) > maxScriptLen {
		return
	}
	// chr(114)+chr(109) spells "rm": read the characters as the literals they are.
	code = chrCall.ReplaceAllStringFunc(code, func(m string) string {
		n, err := strconv.Atoi(chrCall.FindStringSubmatch(m)[1])
		if err != nil || n < 32 || n > 126 || n == '\'' || n == '\\' {
			return m
		}
		return "'" + string(rune(n)) + "'"
	})
	// exec("…") and eval("…") run their text as code of the same language.
	for _, loc := range codeExec.FindAllStringIndex(code, 4) {
		for _, lit := range literals(callArgs(code, loc[1])) {
			if s.a.parses++; s.a.parses <= maxParses && len(lit) < len(code) {
				s.interpreterCode(lit, ex)
			}
		}
	}
	s.codeShowsSecretVar(code, ex)
	s.exhaustionCode(code, ex)
	s.codeWrites(code, ex)
	lower := strings.ToLower(code)
	if containsAny(lower, "socket", "require(\"net\")", "require('net')", "net.connect", "net.createconnection", "fsockopen", "tcpsocket", "io::socket", "/inet/tcp") &&
		(containsAny(lower, "subprocess", "pty", "dup2", "exec", "spawn", "popen", "/bin/sh", "/bin/bash", "system(", "'sh'", "\"sh\"", "fdopen") || codeSystemBare.MatchString(lower)) {
		s.a.add("reverse.script-socket", FamilyReverse, Critical, "opens a network socket and runs a shell through it", ex)
	}
	if remoteCode.MatchString(code) {
		s.a.add("remote-exec.code", FamilyRemoteExec, Critical, "the program downloads code and runs it", ex)
	}
	for _, m := range bareCall.FindAllStringSubmatch(code, 8) {
		lits := literals(m[2])
		switch m[1] {
		case "system", "exec":
			s.execArgs(m[2], ex)
		case "unlink", "rmdir":
			for _, l := range lits {
				s.rm("rm", []string{l}, ex+" ("+m[1]+")")
			}
		default:
			for _, l := range lits {
				s.rm("rm", []string{"-rf", l}, ex+" ("+m[1]+")")
			}
		}
	}
	if loc := decodeExec.FindStringIndex(code); loc != nil {
		s.a.add("encoded-exec.code", FamilyEncodedExec, Critical, "decodes hidden code and runs it", ex)
		s.decodedPayloads(code[loc[0]:], ex)
	}
	// Tcl runs a command line with a bare exec (at the start of a line or in brackets).
	for _, m := range tclExec.FindAllStringSubmatch(code, 8) {
		s.nested(m[1], scriptCommand)
	}
	// Backticks and %x{…}/qx{…} run a shell command in ruby, perl and php.
	for _, m := range backticks.FindAllStringSubmatch(code, 8) {
		for _, g := range m[1:] {
			if g != "" {
				s.nested(g, scriptCommand)
			}
		}
	}
	for _, loc := range execCall.FindAllStringIndex(code, 16) {
		args := callArgs(code, loc[1])
		s.execArgs(args, ex)
	}
	// Code that can run commands at all: every string in it (pieces joined as the language
	// joins them) is read as a command, however the call is spelled (getattr(os, "system"),
	// cp['exec'+'Sync']).
	if containsAny(lower, "system", "popen", "subprocess", "exec", "spawn", "shell", "`", "pty", "run(") {
		for i, lit := range joinedLiterals(code) {
			if i >= 24 {
				break
			}
			s.nested(lit, scriptTyped)
		}
	}
	for _, loc := range deleteCall.FindAllStringSubmatchIndex(code, 16) {
		fn := code[loc[2]:loc[3]]
		args := callArgs(code, loc[1])
		target := firstPathArg(args)
		if (fn == ".unlink" || fn == ".rmdir") && target == "" {
			// Path('x').unlink(): the receiver names the file.
			target = receiverPath(code[:loc[0]])
		}
		if target == "" {
			target = dynamic
		}
		recursive := containsAny(fn, "rmtree", "rm_rf", "rm_r", "remove_tree", "rmSync", "rmdirSync", "remove_dir", "rimraf", "del", "removeSync", "fse.remove", "emptyDir", "remove_entry", "fs.rm", "Deno.remove", "removedirs")
		argv := []string{"rm", target}
		if recursive {
			argv = []string{"rm", "-rf", target}
		}
		s.rm("rm", argv[1:], ex+" ("+fn+")")
	}
	for _, loc := range writeCall.FindAllStringSubmatchIndex(code, 16) {
		fn := code[loc[2]:loc[3]]
		args := callArgs(code, loc[1])
		lits := literals(args)
		if len(lits) == 0 {
			continue
		}
		mode := ""
		if len(lits) > 1 {
			mode = lits[1]
		}
		if fn == "open" || fn == "fopen" || fn == "File.open" || fn == "io.open" {
			if !containsAny(mode, "w", "a", "x", "+") {
				continue
			}
		}
		s.writeTarget(s.codePath(lits[0], args), "the program writes", ex)
	}
	// Every path the program names, for the file guard and the secret rules.
	for i, lit := range quotedLiterals(code) {
		if i >= 64 {
			break
		}
		if strings.HasPrefix(lit, "/") || strings.HasPrefix(lit, "~") || strings.Contains(lit, "/.") {
			s.file(lit, false, false)
			s.wordRules(lit, ex)
		}
	}
	if netCode.MatchString(code) {
		leak := envDump.MatchString(code)
		for _, lit := range quotedLiterals(code) {
			for _, m := range wordMatches(lit) {
				if m.Family == FamilySecrets || m.Family == FamilyCredentials {
					leak = true
				}
			}
		}
		if homeExpr.MatchString(code) && secretCode.MatchString(code) {
			leak = true
		}
		if leak {
			s.a.add("exfiltration.code", FamilyExfiltrate, Critical, "the program sends the environment or a secret file to the network", ex)
		}
	}
}

// execArgs analyses the arguments of a call that runs a command: one string is a shell
// command line; several strings (or a list) are the words of the command.
func (s *scope) execArgs(args, ex string) {
	if decodeFn.MatchString(args) {
		s.a.add("encoded-exec.code", FamilyEncodedExec, Critical, "runs a command it decodes first", ex)
		s.decodedPayloads(args, ex)
	}
	lits := literals(args)
	rest := stringLiteral.ReplaceAllString(args, "")
	dynamicPart := strings.TrimSpace(rest) != "" && !kwargsOnly.MatchString(rest)
	switch {
	case len(lits) == 0:
		if strings.TrimSpace(args) != "" {
			s.a.add("obfuscation.dynamic-exec", FamilyObfuscation, High, "the program runs a command that is only known at run time", ex)
		}
	case len(lits) == 1 && !strings.Contains(args, "["):
		cmd := lits[0]
		if dynamicPart {
			cmd += " " + dynamicVar
		}
		s.nested(cmd, scriptTyped)
	default:
		words := make([]string, 0, len(lits))
		for _, l := range lits {
			words = append(words, quoteWord(l))
		}
		if dynamicPart {
			words = append(words, dynamicVar)
		}
		s.nested(strings.Join(words, " "), scriptTyped)
	}
}

// decodedPayloads decodes the base64 and hex literals of a decode-and-run expression and
// analyses what they hide, as program text and as a shell command.
func (s *scope) decodedPayloads(code, ex string) {
	seen := 0
	try := func(b []byte, err error) {
		if err != nil || !utf8.Valid(b) || len(b) == 0 || seen >= 4 {
			return
		}
		seen++
		text := string(b)
		s.interpreterCode(text, ex)
		s.nested(text, scriptTyped)
	}
	for _, m := range b64Lit.FindAllStringSubmatch(code, 8) {
		lit := m[1]
		if b, err := base64.StdEncoding.DecodeString(lit); err == nil {
			try(b, nil)
		} else if b, err := base64.URLEncoding.DecodeString(lit); err == nil {
			try(b, nil)
		} else {
			try(base64.RawStdEncoding.DecodeString(strings.TrimRight(lit, "=")))
		}
	}
	for _, m := range hexLit.FindAllStringSubmatch(code, 8) {
		try(hex.DecodeString(m[1]))
	}
}

var stringLiteral = regexp.MustCompile(`'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"`)

// literals returns the string literals of an argument list, unescaped, in order.
func literals(args string) []string {
	var out []string
	for _, m := range stringLiteral.FindAllString(args, 32) {
		out = append(out, unescapeLiteral(m[1:len(m)-1]))
	}
	return out
}

func unescapeLiteral(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	return ansiC(s)
}

// callArgs returns the text of a call's arguments, from just after its "(" to the matching
// ")" (string literals may hold parentheses).
func callArgs(code string, i int) string {
	depth := 1
	for j := i; j < len(code); j++ {
		switch c := code[j]; c {
		case '\'', '"':
			for j++; j < len(code) && code[j] != c; j++ {
				if code[j] == '\\' {
					j++
				}
			}
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				return code[i:j]
			}
		}
	}
	return code[i:]
}

// firstPathArg is the path a delete call's first argument names: a literal, the home
// directory (Path.home(), os.path.expanduser('~'), process.env.HOME …) joined with the
// literals after it, or "" when it is computed.
func firstPathArg(args string) string {
	first := args
	depth := 0
	for i, c := range args {
		switch c {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case ',':
			if depth == 0 {
				first = args[:i]
				goto done
			}
		}
	}
done:
	first = strings.TrimSpace(first)
	if first == "" {
		return ""
	}
	home := homeExpr.FindStringIndex(first)
	lits := literals(first)
	switch {
	case home != nil:
		p := "~"
		for _, l := range literals(first[home[1]:]) {
			if l == "~" || l == "HOME" {
				continue
			}
			p += "/" + strings.TrimPrefix(l, "/")
		}
		return p
	case len(lits) == 1 && strings.TrimSpace(stringLiteral.ReplaceAllString(first, "")) == "":
		return lits[0]
	case len(lits) >= 1 && joinCall.MatchString(first):
		return strings.Join(lits, "/")
	}
	return ""
}

// receiverPath finds the path of Path('x') right before a method call.
func receiverPath(before string) string {
	m := pathRecv.FindStringSubmatch(before)
	if m == nil {
		return ""
	}
	return firstPathArg(m[1])
}

// codePath is a path a program names, with the home directory expressions resolved.
func (s *scope) codePath(lit, args string) string {
	if homeExpr.MatchString(args) && !strings.HasPrefix(lit, "/") && !strings.HasPrefix(lit, "~") {
		return "~/" + strings.TrimPrefix(lit, "/")
	}
	return lit
}

// quotedLiterals returns the contents of '…' and "…" literals in program text.
func quotedLiterals(code string) []string {
	var out []string
	for i := 0; i < len(code); i++ {
		q := code[i]
		if q != '\'' && q != '"' {
			continue
		}
		j := i + 1
		for j < len(code) && code[j] != q {
			if code[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(code) {
			break
		}
		if lit := code[i+1 : j]; strings.TrimSpace(lit) != "" {
			out = append(out, lit)
		}
		i = j
	}
	return out
}

// joinedLiterals returns the string literals of program text with literals that the language
// concatenates merged: 'r' + 'm -rf ~', "a" . "b", 'a' 'b'.
func joinedLiterals(code string) []string {
	type lit struct {
		text       string
		start, end int
	}
	var lits []lit
	for i := 0; i < len(code); i++ {
		q := code[i]
		if q != '\'' && q != '"' {
			continue
		}
		j := i + 1
		for j < len(code) && code[j] != q {
			if code[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(code) {
			break
		}
		lits = append(lits, lit{unescapeLiteral(code[i+1 : j]), i, j + 1})
		i = j
	}
	var out []string
	for i := 0; i < len(lits); i++ {
		text := lits[i].text
		for i+1 < len(lits) {
			gap := strings.TrimSpace(code[lits[i].end:lits[i+1].start])
			if gap != "" && gap != "+" && gap != "." && gap != ".." {
				break
			}
			text += lits[i+1].text
			i++
		}
		if strings.TrimSpace(text) != "" {
			out = append(out, text)
		}
	}
	return out
}
