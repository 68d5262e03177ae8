package guard

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"cubicle/backend/fault"
)

// Rule is a regular-expression rule over a call's subject text (a command or a path). The
// built-in rules are a second net behind the shell-aware analysis; Config.ExtraRules adds
// rules of the same shape.
type Rule struct {
	// ID names the rule in matches ("custom.N" when empty).
	ID string
	// Family groups the rule (FamilyCustom when empty).
	Family Family
	// Severity ranks a match (MEDIUM when empty).
	Severity Severity
	// Reason says, for people, why a match is risky.
	Reason string
	// Pattern is an RE2 expression searched for in the subject.
	Pattern string

	re    *regexp.Regexp
	hints []string // lower-case literals of which one must occur for the rule to match
}

func (r Rule) compile() (Rule, error) {
	if r.Pattern == "" {
		return r, fault.Invalid("rule %q has no pattern", r.ID)
	}
	re, err := regexp.Compile(r.Pattern)
	if err != nil {
		return r, fault.Invalid("rule %q: bad pattern %q: %v", r.ID, r.Pattern, err)
	}
	r.re = re
	if r.ID == "" {
		r.ID = "custom." + r.Pattern
	}
	if r.Family == "" {
		r.Family = FamilyCustom
	}
	if r.Severity == "" {
		r.Severity = Medium
	}
	if r.Severity.Rank() == 0 {
		return r, fault.Invalid("rule %q: unknown severity %q: use LOW, MEDIUM, HIGH or CRITICAL", r.ID, r.Severity)
	}
	if r.Reason == "" {
		r.Reason = fmt.Sprintf("matches the rule %s", r.ID)
	}
	return r, nil
}

// match reports the first match of r in s, with lower the lower-cased s for the hints.
func (r *Rule) match(s, lower string) (Match, bool) {
	if len(r.hints) > 0 {
		found := false
		for _, h := range r.hints {
			if strings.Contains(lower, h) {
				found = true
				break
			}
		}
		if !found {
			return Match{}, false
		}
	}
	loc := r.re.FindStringIndex(s)
	if loc == nil {
		return Match{}, false
	}
	return Match{RuleID: r.ID, Family: r.Family, Severity: r.Severity, Reason: r.Reason,
		Excerpt: excerpt(s[loc[0]:loc[1]])}, true
}

// cmdStart anchors a regex at a command position: the start, or after an operator, with
// optional wrappers and a directory before the command name.
const cmdStart = "(?:^|[\\n;&|(){}`!])\\s*(?:(?:sudo|doas|env|nohup|exec|command|builtin|time|nice|xargs|busybox)\\s+(?:-\\S+\\s+)*)*(?:[\\w./-]*/)?\\\\?"

const shells = `(?:[\w./-]*/)?(?:ba|da|z|k|c|tc|fi|a|mk|yash|rbash)?sh\b`

// sensitiveWordRules apply to whole words: every expanded shell argument, redirect target and
// file-tool path, and the raw text as well.
var sensitiveWordRules = mustRules(append([]Rule{
	{ID: "secrets.environ", Family: FamilySecrets, Severity: High, Pattern: `/proc/[^/\s]+/environ`,
		Reason: "reads another process's environment (/proc/*/environ), which holds secrets", hints: []string{"environ"}},
	{ID: "secrets.shadow", Family: FamilySecrets, Severity: High, Pattern: `/etc/(?:g?shadow|master\.passwd)\b`,
		Reason: "touches the system password hashes", hints: []string{"shadow", "master.passwd"}},
	{ID: "secrets.private-key", Family: FamilySecrets, Severity: High, Pattern: `\.ssh/(?:id_[^\s/.'")]*(?:\.(?:bak|old|orig|save|backup|copy|tmp|\d+))?|[^\s/]*_(?:rsa|dsa|ecdsa|ed25519)|[^\s/]*\.pem)(?:$|[\s;&|'")])|\.ssh/\*?$|/etc/ssh/ssh_host_[a-z0-9]+_key(?:$|[\s;&|'")])`,
		Reason: "touches an SSH private key", hints: []string{".ssh/", "ssh_host_"}},
	{ID: "persistence.authorized-keys", Family: FamilyPersistence, Severity: High, Pattern: `authorized_keys`,
		Reason: "touches SSH authorized_keys (a way to plant a login)", hints: []string{"authorized_keys"}},
	{ID: "persistence.sudoers", Family: FamilyPersistence, Severity: High, Pattern: `/etc/sudoers|sudoers\.d`,
		Reason: "touches the sudoers configuration", hints: []string{"sudoers"}},
	{ID: "persistence.cron", Family: FamilyPersistence, Severity: High, Pattern: `/etc/cron(?:tab|\.[a-z]+)|/var/spool/cron|/etc/anacrontab`,
		Reason: "touches the system cron tables", hints: []string{"cron"}},
	{ID: "persistence.systemd-unit", Family: FamilyPersistence, Severity: Medium, Pattern: `/etc/systemd/system/|/lib/systemd/system/|\.config/systemd/user/`,
		Reason: "touches systemd unit files (services that start by themselves)", hints: []string{"systemd"}},
	{ID: "reverse.dev-tcp", Family: FamilyReverse, Severity: Critical, Pattern: `/dev/(?:tcp|udp)/|/inet6?/(?:tcp|udp)/`,
		Reason: "opens a raw network connection through /dev/tcp (typical of reverse shells)", hints: []string{"/dev/tcp", "/dev/udp", "/inet"}},
	{ID: "power.sysrq", Family: FamilyPower, Severity: Critical, Pattern: `/proc/sysrq-trigger`,
		Reason: "writes to the magic SysRq trigger (instant reboot or crash)", hints: []string{"sysrq"}},
	{ID: "credentials.cloud-metadata", Family: FamilyCredentials, Severity: High,
		Pattern: `169\.254\.169\.254|169\.254\.170\.2\b|\bmetadata\.google\.internal|\bmetadata\.azure\.com|100\.100\.100\.200|\[?fd00:ec2::254`,
		Reason:  "asks the cloud metadata service, which hands out the machine's credentials", hints: []string{"169.254.1", "metadata.", "100.100.100.200", "fd00:ec2"}},
	{ID: "secrets.run-secrets", Family: FamilySecrets, Severity: High, Pattern: `^/run/secrets/|^/var/run/secrets/`,
		Reason: "reads a mounted container secret (/run/secrets)", hints: []string{"/secrets/"}},
	{ID: "secrets.proc-mem", Family: FamilySecrets, Severity: High, Pattern: `/proc/[^/\s]+/mem\b|/dev/k?mem\b`,
		Reason: "reads another process's memory", hints: []string{"/mem", "/maps", "cmdline"}},
}, credentialRules...))

// builtinRuleList is the regex net over the raw command text.
var builtinRuleList = mustRules([]Rule{
	{ID: "re.rm-root", Family: FamilyDestructive, Severity: Critical,
		Pattern: cmdStart + `rm\s+(?:-\S+\s+)*(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\s+(?:-\S+\s+)*(?:/|/\*|~/?|~/\*|\$HOME/?|\$\{HOME\}/?|"\$HOME"/?|/(?:etc|usr|bin|sbin|boot|lib|lib64|var|home|root|opt|dev|sys|proc|srv)/?)(?:\s|$|[;&|)])`,
		Reason:  "recursively deletes the root or home directory", hints: []string{"rm"}},
	{ID: "re.rm-no-preserve-root", Family: FamilyDestructive, Severity: Critical, Pattern: `--no-preserve-root`,
		Reason: "disables rm's protection of /", hints: []string{"no-preserve-root"}},
	{ID: "re.chmod-777-root", Family: FamilyPermissions, Severity: High,
		Pattern: cmdStart + `chmod\s+(?:-\S+\s+)*(?:0?777|a\+rwx|ugo\+rwx|o\+w)\s+(?:-\S+\s+)*/(?:\s|$|[a-z])`,
		Reason:  "makes system paths writable for everyone", hints: []string{"chmod"}},
	{ID: "re.chown-root", Family: FamilyPermissions, Severity: High,
		Pattern: cmdStart + `(?:chown|chgrp)\s+(?:-\S+\s+)*-[a-zA-Z]*R[a-zA-Z]*\s+(?:-\S+\s+)*\S+\s+/(?:\s|$|etc|usr|bin|sbin|lib|boot|var|home|root)`,
		Reason:  "recursively changes the owner of system paths", hints: []string{"chown", "chgrp"}},
	{ID: "re.mkfs", Family: FamilyDisk, Severity: Critical, Pattern: cmdStart + `(?:mkfs(?:\.\w+)?|mke2fs|mkswap|wipefs|blkdiscard)\b`,
		Reason: "formats or wipes a disk", hints: []string{"mkfs", "mke2fs", "mkswap", "wipefs", "blkdiscard"}},
	{ID: "re.dd-device", Family: FamilyDisk, Severity: Critical, Pattern: `\bdd\b[^\n;|&]*\bof=/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|md|dm-|disk|mapper|loop|mem|kmem|port)`,
		Reason: "writes raw data onto a disk device", hints: []string{"dd"}},
	{ID: "re.redirect-device", Family: FamilyDisk, Severity: Critical, Pattern: `>\s*/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|md|dm-|disk|mapper|mem|kmem|port)`,
		Reason: "overwrites a disk or memory device", hints: []string{"/dev/"}},
	{ID: "re.fork-bomb", Family: FamilyForkBomb, Severity: Critical, Pattern: `([\w:.]+)\s*\(\)\s*\{[^}]*\b?([\w:.]+)\s*\|\s*([\w:.]+)\s*&`,
		Reason: "defines a function that pipes into itself in the background (fork bomb)", hints: []string{"()"}},
	{ID: "re.fork-bomb-perl", Family: FamilyForkBomb, Severity: Critical, Pattern: `fork\s*(?:\(\s*\))?\s*while\s*fork|while\s*\(?\s*(?:1|true|True)\s*\)?\s*:?\s*os\.fork\(|\$0\s*\|\s*\$0\s*&|\$0\s*&\s*\$0`,
		Reason: "spawns processes without end (fork bomb)", hints: []string{"fork", "$0"}},
	{ID: "re.power", Family: FamilyPower, Severity: High, Pattern: cmdStart + `(?:reboot|shutdown|halt|poweroff|kexec)\b|` + cmdStart + `(?:init|telinit)\s+[06]\b`,
		Reason: "reboots or powers off the machine", hints: []string{"reboot", "shutdown", "halt", "poweroff", "kexec", "init"}},
	{ID: "re.systemctl-power", Family: FamilyPower, Severity: High, Pattern: cmdStart + `systemctl\s+(?:\S+\s+)*(?:reboot|poweroff|halt|kexec|suspend|hibernate|emergency|rescue)\b`,
		Reason: "reboots, suspends or powers off the machine", hints: []string{"systemctl"}},
	{ID: "re.service", Family: FamilyService, Severity: Medium,
		Pattern: cmdStart + `systemctl\s+(?:-\S+\s+)*(?:restart|stop|disable|mask|kill|isolate|daemon-reexec)\b|` + cmdStart + `service\s+\S+\s+(?:restart|stop|force-reload)\b|/etc/init\.d/\S+\s+(?:restart|stop)\b`,
		Reason:  "stops or restarts a system service", hints: []string{"systemctl", "service", "init.d"}},
	{ID: "re.kill-all", Family: FamilyKill, Severity: Critical, Pattern: cmdStart + `kill\s+(?:-\S+\s+)*-?1(?:\s|$|[;&|)])`,
		Reason: "signals init or every process", hints: []string{"kill"}},
	{ID: "re.pkill", Family: FamilyKill, Severity: Medium, Pattern: cmdStart + `(?:pkill|killall5?|kill\s+-(?:9|KILL|SIGKILL))\b`,
		Reason: "kills processes", hints: []string{"kill"}},
	{ID: "re.curl-sh", Family: FamilyRemoteExec, Severity: Critical,
		Pattern: `\b(?:curl|wget|fetch|aria2c|http|lwp-request)\b[^\n;&]*\|\s*(?:sudo\s+(?:-\S+\s+)*)?(?:env\s+)?(?:` + shells + `(?:\s|$)|(?:python[0-9.]*|perl|ruby|node|php)\s*(?:-\s*)?(?:$|[;&|)]))|` +
			`\b(?:source|\.|` + shells + `)\s+<\(\s*(?:curl|wget)|\beval\s+"?\$\(\s*(?:curl|wget)`,
		Reason: "downloads code and runs it", hints: []string{"curl", "wget", "fetch", "aria2c", "http", "lwp-request"}},
	{ID: "re.decode-sh", Family: FamilyEncodedExec, Severity: Critical,
		Pattern: `\b(?:base64|base32|xxd|openssl|uudecode|rev)\b[^\n;&]*\|\s*(?:sudo\s+)?(?:` + shells + `(?:\s|$)|(?:python[0-9.]*|perl)\s*(?:-\s*)?(?:$|[;&|)]))`,
		Reason:  "decodes hidden code and runs it", hints: []string{"base64", "base32", "xxd", "openssl", "uudecode", "rev"}},
	{ID: "re.ifs", Family: FamilyIFS, Severity: High, Pattern: `\$\{?IFS\b`,
		Reason: "uses $IFS to hide spaces (an evasion trick)", hints: []string{"ifs"}},
	{ID: "re.privilege", Family: FamilyPrivilege, Severity: High, Pattern: cmdStart + `(?:sudo|su|doas|pkexec|run0)(?:\s|$)`,
		Reason: "runs a command with elevated privileges", hints: []string{"sudo", "su", "doas", "pkexec", "run0"}},
	{ID: "re.crontab", Family: FamilyPersistence, Severity: High, Pattern: cmdStart + `crontab\s+["']?(?:-[^l\s"']|-(?:\s|$|["'])|[^-\s"'])`,
		Reason: "changes a crontab (scheduled commands)", hints: []string{"crontab"}},
	{ID: "re.nc-exec", Family: FamilyReverse, Severity: Critical, Pattern: `\b(?:nc|ncat|netcat)(?:\.\w+)?\s(?:[^\n;|&]*\s)?(?:-[a-zA-Z]*e(?:\s|$)|-c\s|--exec|--sh-exec|--lua-exec)`,
		Reason: "connects a shell to the network with netcat", hints: []string{"nc", "netcat"}},
	{ID: "re.socat-exec", Family: FamilyReverse, Severity: Critical, Pattern: `(?i)\bsocat\b[^\n]*\b(?:exec|system):`,
		Reason: "connects a program to the network with socat", hints: []string{"socat"}},
	{ID: "re.bash-i", Family: FamilyReverse, Severity: Critical, Pattern: `\b` + shells + `\s+-i\b[^\n]*(?:[0-9]?>&|&>)`,
		Reason: "redirects an interactive shell (typical of reverse shells)", hints: []string{"-i"}},
	{ID: "re.script-socket", Family: FamilyReverse, Severity: Critical,
		Pattern: `\b(?:python[0-9.]*|perl|ruby|php|node|lua)\b[^\n]*\bsocket\b[^\n]*(?:\bsubprocess|\bpty\b|\bdup2|\bexec|\bspawn|\bpopen|/bin/(?:ba)?sh\b|\bsystem\()`,
		Reason:  "opens a network socket and runs a shell through it", hints: []string{"socket"}},
	{ID: "re.mkfifo-nc", Family: FamilyReverse, Severity: High, Pattern: `\b(?:mkfifo|mknod)\b[^\n]*\b(?:nc|ncat|netcat|telnet|openssl)\b`,
		Reason: "wires a named pipe to a network tool (typical of reverse shells)", hints: []string{"mkfifo", "mknod"}},
})

func mustRules(rs []Rule) []Rule {
	out := make([]Rule, len(rs))
	for i, r := range rs {
		hints := r.hints
		c, err := r.compile()
		if err != nil {
			panic(err) // a broken built-in rule is a programming error caught by every test
		}
		c.hints = hints
		out[i] = c
	}
	return out
}

// builtinRules returns a fresh slice of the regex net, to which a Guard appends ExtraRules.
func builtinRules() []Rule {
	out := make([]Rule, 0, len(builtinRuleList)+len(sensitiveWordRules))
	out = append(out, builtinRuleList...)
	return append(out, sensitiveWordRules...)
}

// regexNet runs the regex rules over text. A built-in rule is skipped when the shell-aware
// analysis already matched its family (it would add nothing but noise); extra rules always run.
func (g *Guard) regexNet(text string, have map[Family]bool) []Match {
	lower := strings.ToLower(text)
	var out []Match
	nBuiltin := len(builtinRuleList) + len(sensitiveWordRules)
	for i := range g.rules {
		r := &g.rules[i]
		if i < nBuiltin && have[r.Family] {
			continue
		}
		if m, ok := r.match(text, lower); ok {
			out = append(out, m)
		}
	}
	return out
}

// wordMatches applies the sensitive-word rules to one word (an argument or a path), also to
// the sensitive files a wildcard in it may stand for.
func wordMatches(w string) []Match {
	return append(directWordMatches(w), globMatches(w)...)
}

// directWordMatches applies the sensitive-word rules to one word as it is.
func directWordMatches(w string) []Match {
	var out []Match
	var lower string
	for i := range sensitiveWordRules {
		r := &sensitiveWordRules[i]
		if lower == "" {
			lower = strings.ToLower(w)
		}
		if m, ok := r.match(w, lower); ok {
			out = append(out, m)
		}
	}
	return out
}

// excerpt shortens s for a match.
func excerpt(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(s, dynamic, "$?"), dynamicVar, "$?"))
	const max = 160
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// analysePath checks a file tool's path: hidden characters, sensitive files, and (for
// writes) devices and system directories.
func (g *Guard) analysePath(p string, write bool) []Match {
	ms := textMatches(p, scriptTyped)
	clean := strings.Map(dropControl, p)
	if norm, changed := normalizeUnicode(clean); changed {
		clean = norm
	}
	ms = append(ms, wordMatches(clean)...)
	if write && strings.HasPrefix(clean, "/") {
		s := &scope{a: &analysis{}}
		s.writeTarget(path.Clean(clean), "writes into", p)
		ms = append(ms, s.a.matches...)
	}
	have := make(map[Family]bool, len(ms))
	for _, m := range ms {
		have[m.Family] = true
	}
	return append(ms, g.regexNet(clean, have)...)
}
