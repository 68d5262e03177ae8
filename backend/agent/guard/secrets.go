package guard

import (
	"path"
	"regexp"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// credentialRules are sensitive-word rules for the usual secret files beyond SSH keys: cloud,
// Kubernetes, Docker, git and GitHub, netrc, GnuPG, package registry tokens and browser
// password stores. They apply to every word (argument, redirection target, file-tool path),
// so reading such a file is asked about, and sending one to the network is exfiltration.
var credentialRules = []Rule{
	{ID: "credentials.cloud", Family: FamilyCredentials, Severity: High,
		Pattern: `\.aws/(?:credentials|config|sso/cache)|\.config/gcloud/|application_default_credentials\.json|\.azure/|\.oci/config|\.config/doctl/|\.digitalocean`,
		Reason:  "touches cloud credentials (AWS, Google Cloud, Azure, …)", hints: []string{".aws", "gcloud", "application_default", ".azure", ".oci", "doctl", "digitalocean"}},
	{ID: "credentials.kube", Family: FamilyCredentials, Severity: High,
		Pattern: `\.kube/config|/etc/kubernetes/(?:admin|kubelet|controller-manager|scheduler|super-admin)\.conf|/run/secrets/kubernetes\.io/|/etc/kubernetes/pki/`,
		Reason:  "touches Kubernetes credentials", hints: []string{".kube", "kubernetes"}},
	{ID: "credentials.docker", Family: FamilyCredentials, Severity: High, Pattern: `\.docker/config\.json|containers/auth\.json`,
		Reason: "touches container registry credentials", hints: []string{".docker", "auth.json"}},
	{ID: "credentials.git", Family: FamilyCredentials, Severity: High,
		Pattern: `\.git-credentials|\.config/git/credentials|\.config/gh/hosts\.ya?ml|\.config/gh/config|\.config/hub\b|\.config/glab-cli/`,
		Reason:  "touches git or GitHub credentials", hints: []string{"credentials", ".config/gh", "hub", "glab"}},
	{ID: "credentials.netrc", Family: FamilyCredentials, Severity: High, Pattern: `(?:^|[/=@~:])[._]netrc\b`,
		Reason: "touches a .netrc file (saved logins)", hints: []string{"netrc"}},
	{ID: "credentials.gpg", Family: FamilyCredentials, Severity: High, Pattern: `\.gnupg(?:/|$)|\.password-store(?:/|$)|secring\.gpg`,
		Reason: "touches GnuPG keys or the password store", hints: []string{".gnupg", "password-store", "secring"}},
	{ID: "credentials.tokens", Family: FamilyCredentials, Severity: High,
		Pattern: `(?:^|[/=@~:])(?:\.npmrc|\.pypirc|\.vault-token|\.pgpass|\.my\.cnf|\.s3cfg|\.boto|\.gem/credentials|\.m2/settings-security\.xml)\b|\.terraform\.d/credentials|\.cargo/credentials|rclone/rclone\.conf|\.config/op/|\.local/share/keyrings|/etc/ssl/private|\.mozilla/firefox/[^\s]*(?:logins\.json|key[34]\.db|cookies\.sqlite)|/(?:google-chrome|chromium|BraveSoftware)/[^\s]*(?:Login Data|Cookies|Web Data)`,
		Reason:  "touches saved tokens, passwords or browser logins", hints: []string{".npmrc", ".pypirc", "vault-token", "pgpass", ".my.cnf", "s3cfg", ".boto", "credentials", "rclone", "/op/", "keyrings", "ssl/private", "firefox", "chrom", "brave", "settings-security"}},
	{ID: "secrets.key-file", Family: FamilySecrets, Severity: High, Pattern: `(?:^|/)[^/\s]+\.(?:key|p12|pfx|ppk|jks|keystore|kdbx)$`,
		Reason: "touches a private key or key store", hints: []string{".key", ".p12", ".pfx", ".ppk", ".jks", ".keystore", ".kdbx"}},
	{ID: "secrets.ssh-agent", Family: FamilySecrets, Severity: High, Pattern: `SSH_AUTH_SOCK|/ssh-[^/\s]+/agent\.\d+`,
		Reason: "uses the SSH agent's socket (signs in as the user)", hints: []string{"ssh_auth_sock", "agent."}},
	{ID: "secrets.history", Family: FamilySecrets, Severity: Medium, Pattern: `\.(?:bash|zsh|python|mysql|psql|node_repl|sqlite|rediscli)_history\b|\.histfile\b|/\.lesshst\b`,
		Reason: "touches a shell or program history (often holds typed secrets)", hints: []string{"_history", "histfile", "lesshst"}},
}

// globCandidates are concrete sensitive files a wildcard word may stand for: cat /e?c/sha*
// reads /etc/shadow, cat ~/.ss?/id_* a private key.
var globCandidates = []string{
	"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/sudoers.d/x", "/etc/crontab", "/etc/cron.d/x",
	"/proc/self/environ", "/proc/1/environ", "/dev/sda", "/dev/nvme0n1", "/dev/tcp/x", "/proc/sysrq-trigger",
	"~/.ssh/id_rsa", "~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/authorized_keys", "~/.aws/credentials",
	"~/.kube/config", "~/.docker/config.json", "~/.git-credentials", "~/.netrc", "~/.gnupg/private-keys-v1.d",
	"~/.config/gh/hosts.yml", "~/.npmrc", "~/.bash_history", "/root/.ssh/id_rsa", "/root/.ssh/authorized_keys",
	"/var/log/auth.log", "/var/log/syslog", "/var/log/wtmp", "/var/log/btmp", "/var/log/lastlog",
}

// globMatches applies the sensitive-word rules to the sensitive files a wildcard word may
// match.
func globMatches(w string) []Match {
	if !strings.ContainsAny(w, "*?[") {
		return nil
	}
	var out []Match
	for _, c := range globCandidates {
		if ok, _ := path.Match(w, c); ok {
			for _, m := range directWordMatches(c) {
				m.Reason += " (through the wildcard " + excerpt(w) + ")"
				out = append(out, m)
			}
		}
	}
	return out
}

// envDumpers print the whole environment.
var envDumpers = set("env", "printenv", "export", "declare", "typeset", "set", "compgen")

// secretVar matches names of variables that usually hold secrets.
var secretVar = regexp.MustCompile(`(?i)(?:secret|token|passw|api_?key|private_?key|credential|auth|session|cookie|access_?key)`)

// networkCommand reports whether argv sends data to the network.
func networkCommand(argv []string) bool {
	n := cmdName(argv[0])
	switch {
	case downloaders[n] || networkTools[n]:
		return n != "rsync" || rsyncRemote(argv[1:])
	case n == "ssh" || n == "sftp" || n == "mail" || n == "mailx" || n == "sendmail" || n == "mutt" || n == "msmtp" ||
		n == "dig" || n == "nslookup" || n == "host" || n == "drill" || n == "xh" || n == "httpie" || n == "gsutil" || n == "rclone" || n == "s3cmd" || n == "smbclient" || n == "ncftpput" || n == "lftp" || n == "torify":
		return true
	case n == "aws":
		return len(argv) > 2 && (argv[1] == "s3" || argv[1] == "s3api")
	case n == "ping":
		return hasAny(argv[1:], "-p")
	}
	return false
}

func rsyncRemote(args []string) bool {
	for _, a := range operands(args) {
		if strings.Contains(a, ":") && !strings.HasPrefix(a, "/") || strings.HasPrefix(a, "rsync://") {
			return true
		}
	}
	return false
}

// exfiltration flags a network command that carries secrets: a secret file among its words,
// the environment or a secret file read by a command substitution, or a variable named like a
// secret.
func (s *scope) exfiltration(argv []string, ex string) {
	for _, a := range argv[1:] {
		for _, f := range s.wordForms(a) {
			if s.leaked[cleanFile(f)] {
				s.a.add("exfiltration.leaked-file", FamilyExfiltrate, Critical, "sends a file holding the environment or a secret to the network ("+f+")", ex)
				return
			}
		}
		for _, f := range s.wordForms(a) {
			for _, m := range wordMatches(f) {
				if m.Family == FamilySecrets || m.Family == FamilyCredentials {
					s.a.add("exfiltration.secret-file", FamilyExfiltrate, Critical, "sends a secret to the network ("+m.Reason+")", ex)
					return
				}
			}
			if isDotEnv(f) {
				// HIGH, not CRITICAL: copying a .env to one's own server is a deploy step an
				// allow rule may cover.
				s.a.add("exfiltration.dotenv", FamilyExfiltrate, High, "sends a .env file (secrets) to the network ("+f+")", ex)
				return
			}
		}
	}
}

// wordForms are the forms of a word the sensitive-word rules look at, with a curl-style "@"
// (data from a file) removed.
func (s *scope) wordForms(w string) []string {
	w = strings.TrimPrefix(w, "@")
	if i := strings.Index(w, "=@"); i >= 0 {
		w = w[i+2:]
	}
	if p, ok := s.fileWord(w); ok {
		return s.resolve(p)
	}
	return []string{w}
}

// substExfil flags a network command whose command substitutions dump the environment or read
// secret files, and secret-looking variables in its words.
func (s *scope) substExfil(c *syntax.CallExpr, ex string) {
	secretRef := ""
	dump := false
	for _, w := range c.Args[1:] {
		syntax.Walk(w, func(n syntax.Node) bool {
			switch n := n.(type) {
			case *syntax.ParamExp:
				if n.Param != nil && secretVar.MatchString(n.Param.Value) && secretRef == "" {
					secretRef = n.Param.Value
				}
			case *syntax.CallExpr:
				argv := s.argv(n)
				if len(argv) == 0 {
					return true
				}
				if envDumpers[cmdName(argv[0])] && (len(argv) == 1 || cmdName(argv[0]) != "set" && cmdName(argv[0]) != "export" || hasAny(argv[1:], "-p")) {
					dump = true
				}
				for _, a := range argv[1:] {
					for _, f := range s.wordForms(a) {
						for _, m := range wordMatches(f) {
							if m.Family == FamilySecrets || m.Family == FamilyCredentials {
								dump = true
							}
						}
					}
				}
			}
			return true
		})
	}
	switch {
	case dump:
		s.a.add("exfiltration.subst", FamilyExfiltrate, Critical, "sends the environment or a secret file to the network", ex)
	case secretRef != "":
		s.a.add("exfiltration.secret-var", FamilyExfiltrate, Medium, "sends the variable $"+secretRef+" (named like a secret) to the network", ex)
	}
}

// pipeExfil flags a pipeline in which a stage that dumps the environment or reads a secret
// file feeds a later stage that talks to the network.
func (s *scope) pipeExfil(finals, raws [][]string, inputs []string, ex string) {
	leak := false
	for i, f := range finals {
		if len(f) > 0 && networkCommand(f) && leak {
			s.a.add("exfiltration.pipe", FamilyExfiltrate, Critical, "sends the environment or a secret file to the network through a pipe", ex)
			return
		}
		if len(f) == 0 {
			f = raws[i] // env, export -p: wrappers or declarations with nothing to run
		}
		if len(f) == 0 {
			continue
		}
		n := cmdName(f[0])
		if envDumpers[n] && (len(f) == 1 || n == "env" || n == "printenv" || hasAny(f[1:], "-p", "-x")) {
			leak = true
		}
		words := append([]string(nil), f[1:]...)
		if i < len(inputs) && inputs[i] != "" {
			words = append(words, inputs[i])
		}
		for _, a := range words {
			for _, form := range s.wordForms(a) {
				leak = leak || leaksFile(form)
			}
		}
	}
}

// readsSecret reports whether a command names a secret file among its words.
func (s *scope) readsSecret(argv []string) bool {
	for _, a := range argv[1:] {
		for _, f := range s.wordForms(a) {
			if leaksFile(f) {
				return true
			}
		}
	}
	return false
}

// procSubstProgram analyses sh < <(cmd): a download or a decoder inside runs hidden code; a
// constant output is the program itself.
func (s *scope) procSubstProgram(final []string, ps *syntax.ProcSubst, st *syntax.Stmt) {
	ex := s.text(st)
	download, decode := false, false
	syntax.Walk(ps, func(n syntax.Node) bool {
		if ce, ok := n.(*syntax.CallExpr); ok && len(ce.Args) > 0 {
			if f := finalCommand(s.argv(ce)); len(f) > 0 {
				nm := cmdName(f[0])
				download = download || downloaders[nm] || networkTools[nm]
				decode = decode || decoders[nm]
			}
		}
		return true
	})
	switch {
	case download:
		s.a.add("remote-exec.procsubst", FamilyRemoteExec, Critical, "downloads code and runs it", ex)
	case decode:
		s.a.add("encoded-exec.procsubst", FamilyEncodedExec, Critical, "decodes hidden code and runs it", ex)
	}
	if len(ps.Stmts) == 1 {
		if out, ok := s.static(ps.Stmts[0], "", false); ok {
			s.fedToInterpreter(final, out, st)
		}
	}
}

// hdocSources checks what a here-document or here-string gives a command: a download or a
// decoder in it feeding an interpreter runs hidden code; the environment or a secret file in
// it fed to a network tool leaks.
func (s *scope) hdocSources(final []string, body *syntax.Word, st *syntax.Stmt) {
	ex := s.text(st)
	download, decode, leak := false, false, false
	syntax.Walk(body, func(n syntax.Node) bool {
		ce, ok := n.(*syntax.CallExpr)
		if !ok || len(ce.Args) == 0 {
			return true
		}
		argv := s.argv(ce)
		if len(argv) == 0 {
			return true
		}
		f := finalCommand(argv)
		if len(f) == 0 {
			f = argv
		}
		nm := cmdName(f[0])
		download = download || downloaders[nm] || networkTools[nm]
		decode = decode || decoders[nm]
		leak = leak || envDumpers[nm] || s.readsSecret(f)
		return true
	})
	switch {
	case readsProgramFromStdin(final) && download:
		s.a.add("remote-exec.hdoc", FamilyRemoteExec, Critical, "downloads code and runs it", ex)
	case readsProgramFromStdin(final) && decode:
		s.a.add("encoded-exec.hdoc", FamilyEncodedExec, Critical, "decodes hidden code and runs it", ex)
	case networkCommand(final) && leak:
		s.a.add("exfiltration.hdoc", FamilyExfiltrate, Critical, "sends the environment or a secret file to the network", ex)
	}
}

// forLoop flags a loop that starts thousands of background processes.
func (s *scope) forLoop(f *syntax.ForClause, it *syntax.WordIter) {
	bg := false
	for _, st := range f.Do {
		bg = bg || st.Background
	}
	if !bg {
		return
	}
	text := s.text(it.Items[0])
	for _, m := range bigCount.FindAllStringSubmatch(strings.Join(func() []string {
		var out []string
		for _, w := range it.Items {
			out = append(out, s.text(w))
			// $(seq 1 100000) however seq is spelled: the expanded words of its commands.
			syntax.Walk(w, func(n syntax.Node) bool {
				if c, ok := n.(*syntax.CallExpr); ok {
					if argv := s.argv(c); len(argv) > 0 {
						out = append(out, cmdName(argv[0])+" "+strings.Join(argv[1:], " "))
					}
				}
				return true
			})
		}
		return out
	}(), " "), -1) {
		if len(m[1]) >= 4 {
			s.a.add("fork-bomb.for", FamilyForkBomb, High, "starts thousands of background processes in a loop", text)
			return
		}
	}
}

var bigCount = regexp.MustCompile(`(?:seq\s+(?:\d+\s+)?|\.\.)(\d+)`)
