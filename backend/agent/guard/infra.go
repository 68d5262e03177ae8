package guard

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Commands that destroy what lives outside the machine or fill it up: infrastructure torn
// down (terraform destroy, cloud projects and resource groups deleted), databases dropped,
// packages unpublished, packages installed from an arbitrary URL (their install scripts
// run), setuid copies made with install -m, and writes of tens of gigabytes.

// dangerousSQL finds statements that drop or empty a database, and the Redis and MongoDB
// equivalents.
var dangerousSQL = regexp.MustCompile(`(?i)\b(?:drop\s+(?:database|schema|table|keyspace|collection)|truncate\s+(?:table\s+)?\w|delete\s+from\s+[\w."]+\s*(?:;|$)|flushall|flushdb|dropdatabase\s*\(|\.drop\s*\(\s*\)|deletemany\s*\(\s*\{\s*\}\s*\))`)

// dbClients are the database shells whose command text dangerousSQL reads, and the options
// that carry it.
var dbClients = map[string]map[string]bool{
	"psql": set("-c", "--command"), "mysql": set("-e", "--execute"), "mariadb": set("-e", "--execute"),
	"sqlite3": nil, "mongo": set("--eval"), "mongosh": set("--eval"), "redis-cli": nil,
	"clickhouse-client": set("-q", "--query"), "cqlsh": set("-e", "--execute"), "cockroach": set("-e", "--execute"),
	"duckdb": set("-c"), "sqlcmd": set("-Q", "-q"),
}

// infra applies the rules above to one command.
func (s *scope) infra(name string, args []string, ex string) {
	ops := operands(args)
	sub := strings.Join(ops, " ")
	switch name {
	case "terraform", "tofu", "terragrunt":
		if len(ops) > 0 && (ops[0] == "destroy" || ops[0] == "apply" && hasAny(args, "-destroy", "--destroy")) {
			s.a.add("infra.destroy", FamilyContainer, High, name+" destroys the infrastructure it manages", ex)
		}
	case "pulumi":
		if len(ops) > 0 && (ops[0] == "destroy" || ops[0] == "down" || len(ops) > 1 && ops[0] == "stack" && ops[1] == "rm") {
			s.a.add("infra.destroy", FamilyContainer, High, "pulumi destroys the infrastructure it manages", ex)
		}
	case "gcloud", "az", "doctl", "hcloud", "linode-cli", "flyctl", "fly", "heroku", "vercel", "netlify":
		if slices.ContainsFunc(ops, func(o string) bool {
			return o == "delete" || o == "destroy" || o == "remove" || o == "rm" || o == "purge" || strings.HasPrefix(o, "apps:destroy")
		}) {
			s.a.add("infra.cloud-delete", FamilyContainer, High, "deletes cloud resources ("+name+")", ex)
		}
	case "kubectl", "oc":
		if len(ops) > 1 && ops[0] == "create" && (ops[1] == "clusterrolebinding" || ops[1] == "rolebinding") && slices.ContainsFunc(args, func(a string) bool {
			return strings.Contains(a, "cluster-admin") || strings.HasSuffix(a, "=admin")
		}) {
			s.a.add("privilege.k8s-admin", FamilyPrivilege, High, "grants cluster administrator rights ("+ops[1]+")", ex)
		}
	case "crictl":
		if len(ops) > 0 && (ops[0] == "rm" || ops[0] == "rmp" || ops[0] == "rmi") && (hasAny(args, "-a", "--all") || hasShortFlag(args, 'a')) {
			s.a.add("container.crictl-rm-all", FamilyContainer, High, "removes every container, pod or image (crictl "+ops[0]+" -a)", ex)
		}
	case "ctr", "nerdctl":
		if hasAny(args, "--privileged") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--mount") && strings.Contains(a, "src=/,") }) {
			s.a.add("container.privileged", FamilyContainer, High, name+" runs a privileged container", ex)
		}
	case "machinectl":
		if len(ops) > 0 && (ops[0] == "shell" || ops[0] == "login") {
			s.a.add("privilege.machinectl", FamilyPrivilege, High, "opens a shell as another user (machinectl "+ops[0]+")", ex)
		}
	case "gh":
		if len(ops) >= 2 && ops[1] == "delete" && (ops[0] == "release" || ops[0] == "secret" || ops[0] == "variable" || ops[0] == "environment" || ops[0] == "cache" || ops[0] == "run") {
			s.a.add("git.gh-delete", FamilyGit, Medium, "deletes GitHub "+ops[0]+"s (gh "+ops[0]+" delete)", ex)
		}
	case "npm", "pnpm", "yarn":
		if len(ops) > 0 && (ops[0] == "unpublish" || ops[0] == "deprecate") {
			s.a.add("infra.unpublish", FamilyGit, High, name+" "+ops[0]+" removes a published package", ex)
		}
		if len(ops) > 1 && (ops[0] == "install" || ops[0] == "i" || ops[0] == "add") && slices.ContainsFunc(ops[1:], isURLPackage) {
			s.a.add("remote-exec.package-url", FamilyRemoteExec, Medium, name+" installs a package from a URL (its install scripts run)", ex)
		}
	case "pip", "pip3", "pipx", "uv":
		if strings.Contains(" "+sub+" ", " install ") && slices.ContainsFunc(ops, isURLPackage) {
			s.a.add("remote-exec.package-url", FamilyRemoteExec, Medium, name+" installs a package from a URL (its install code runs)", ex)
		}
	case "install":
		for i, a := range args {
			mode := ""
			if (a == "-m" || a == "--mode") && i+1 < len(args) {
				mode = args[i+1]
			} else if v, ok := strings.CutPrefix(a, "--mode="); ok {
				mode = v
			}
			if _, setuid := modeRisk(mode); setuid {
				s.a.add("privilege.setuid", FamilyPrivilege, High, "installs a setuid or setgid program (install -m "+mode+")", ex)
				break
			}
		}
	case "fallocate":
		for i, a := range args {
			if (a == "-l" || a == "--length") && i+1 < len(args) && hugeSize(args[i+1]) {
				s.a.add("disk.fill", FamilyDisk, Medium, "allocates a huge file ("+args[i+1]+"), which can fill the disk", ex)
			}
		}
	case "truncate":
		for i, a := range args {
			if (a == "-s" || a == "--size") && i+1 < len(args) && hugeSize(args[i+1]) {
				s.a.add("disk.fill", FamilyDisk, Medium, "makes a huge file ("+args[i+1]+"), which can fill the disk", ex)
			}
		}
	case "dd":
		bs, count := int64(512), int64(-1)
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "bs="); ok {
				if n, ok := parseSize(v); ok {
					bs = n
				}
			} else if v, ok := strings.CutPrefix(a, "count="); ok {
				if n, ok := parseSize(v); ok {
					count = n
				}
			}
		}
		if count > 0 && bs > 0 && count <= hugeBytes && bs*count >= hugeBytes {
			s.a.add("disk.fill", FamilyDisk, Medium, "writes tens of gigabytes (dd), which can fill the disk", ex)
		}
	case "head":
		for i, a := range args {
			if (a == "-c" || a == "--bytes") && i+1 < len(args) && hugeSize(args[i+1]) {
				s.a.add("disk.fill", FamilyDisk, Medium, "writes tens of gigabytes (head -c "+args[i+1]+"), which can fill the disk", ex)
			}
		}
	case "git":
		if len(ops) > 1 && ops[0] == "rm" && (hasShortFlag(args, 'r') || hasAny(args, "--recursive")) {
			for _, p := range ops[1:] {
				if c, t := s.worst(p); c == pathCwdAll || c >= pathHomeTop && c != pathSystemDeep {
					s.a.add("git.rm-all", FamilyGit, Medium, "git rm deletes every tracked file under "+describe(t, c), ex)
					break
				}
			}
		}
	}
	if opts, ok := dbClients[name]; ok {
		var texts []string
		for i, a := range args {
			if opts[a] && i+1 < len(args) {
				texts = append(texts, args[i+1])
			}
		}
		if opts == nil {
			texts = append(texts, strings.Join(args, " ")) // sqlite3 DB 'SQL', redis-cli FLUSHALL
		}
		s.sql(name, strings.Join(texts, "\n"), ex)
	}
}

// sql flags text for a database shell that drops or empties a database.
func (s *scope) sql(client, text, ex string) {
	if m := dangerousSQL.FindString(text); m != "" {
		s.a.add("database.drop", FamilyDestructive, High, client+" drops or empties a database ("+strings.Join(strings.Fields(m), " ")+")", ex)
	}
}

func isURLPackage(a string) bool {
	return strings.HasPrefix(a, "http://") || strings.HasPrefix(a, "https://") || strings.HasPrefix(a, "git+") || strings.HasPrefix(a, "git://")
}

// hugeBytes is the size from which a single write is taken to aim at filling the disk.
const hugeBytes = 10 << 30

func hugeSize(v string) bool {
	n, ok := parseSize(strings.TrimLeft(v, "+"))
	return ok && n >= hugeBytes
}

// parseSize reads sizes as dd, truncate, fallocate and head write them: 100G, 4M, 1GiB, 512.
func parseSize(v string) (int64, bool) {
	v = strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(v), "B"), "I")
	mult := int64(1)
	if v != "" {
		switch v[len(v)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		case 'P':
			mult = 1 << 50
		}
		if mult > 1 {
			v = v[:len(v)-1]
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, false
	}
	return n * mult, true
}

// endlessInto flags a command whose output never ends (yes, cat /dev/zero) written into a
// file: it grows until the disk is full.
func (s *scope) endlessInto(final []string, target, ex string) {
	if len(final) == 0 || strings.HasPrefix(target, "/dev/") {
		return
	}
	endless := false
	switch cmdName(final[0]) {
	case "yes":
		endless = true
	case "cat", "tail":
		endless = slices.ContainsFunc(final[1:], func(a string) bool { return a == "/dev/zero" || a == "/dev/urandom" || a == "/dev/random" })
	}
	if endless {
		s.a.add("disk.fill", FamilyDisk, Medium, "writes endless output into a file ("+target+"), which fills the disk", ex)
	}
}

// scopedPathspecs reports whether git clean's arguments name only plain relative paths below
// the working directory (build/, dist): then it deletes no more than rm -rf of them would.
func scopedPathspecs(args []string) bool {
	var specs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-e" || a == "--exclude":
			i++
		case a == "--":
			specs = append(specs, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "-"):
		default:
			specs = append(specs, a)
		}
	}
	for _, p := range specs {
		if strings.HasPrefix(p, ":") || classify(p) != pathRelative || strings.Contains(p, "..") || strings.ContainsAny(p, "*?[") {
			return false
		}
	}
	return len(specs) > 0
}
