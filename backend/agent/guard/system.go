package guard

import (
	"path"
	"regexp"
	"slices"
	"strings"
)

// system applies the rules of the command families that act on the system as a whole:
// working directory changes, history and log wiping, the firewall, destructive git and
// container-engine commands, volume managers and disk firmware, session control and
// credential helpers. It reports true when name was handled completely.
func (s *scope) system(name string, args []string, ex string) bool {
	switch name {
	case "cd", "pushd", "chdir":
		s.chdir(args)
		return true
	case "hash":
		for i, a := range args {
			if a == "-p" && i+2 < len(args) {
				target, alias := args[i+1], args[i+2]
				if cmdName(target) != alias {
					s.a.add("obfuscation.hash", FamilyObfuscation, High, "makes the command name "+alias+" run "+target+" (hash -p)", ex)
					s.hashed[alias] = target
				}
			}
		}
		return true
	case "trap":
		if len(args) > 1 && args[0] != "-p" && args[0] != "-l" && args[0] != "-" {
			s.nested(args[0], scriptCommand)
		}
		return true
	case "sed", "gsed":
		s.sedInPlace(args, ex)
		return false
	case "history":
		if hasAny(args, "-c", "-cw", "-wc") || (hasAny(args, "-w", "-a") && slices.ContainsFunc(args, isNullDevice)) || hasAny(args, "-d") {
			s.a.add("log-wipe.history", FamilyLogWipe, High, "clears the shell history", ex)
		}
		return true
	case "unset":
		for _, a := range args {
			if histVars[a] {
				s.a.add("log-wipe.histfile", FamilyLogWipe, High, "turns off the shell history ("+a+")", ex)
			}
		}
		return true
	case "set", "shopt":
		for i, a := range args {
			if (a == "+o" && i+1 < len(args) && args[i+1] == "history") || (name == "shopt" && a == "-u" && slices.Contains(args, "histappend")) {
				s.a.add("log-wipe.history-off", FamilyLogWipe, High, "turns off the shell history", ex)
			}
		}
		return false
	case "journalctl":
		for _, a := range args {
			if strings.HasPrefix(a, "--vacuum") || a == "--rotate" && slices.ContainsFunc(args, func(x string) bool { return strings.HasPrefix(x, "--vacuum") }) {
				s.a.add("log-wipe.journal", FamilyLogWipe, High, "deletes the system journal ("+a+")", ex)
				return true
			}
		}
		return true
	case "logrotate":
		if hasAny(args, "-f", "--force") {
			s.a.add("log-wipe.logrotate", FamilyLogWipe, Medium, "forces a log rotation", ex)
		}
		return true
	case "auditctl":
		if hasAny(args, "-D", "-e") {
			s.a.add("log-wipe.audit", FamilyLogWipe, High, "deletes or disables the audit rules", ex)
		}
		return true
	case "iptables", "ip6tables", "iptables-legacy", "ip6tables-legacy", "iptables-nft", "ip6tables-nft", "ebtables", "arptables":
		s.iptables(name, args, ex)
		return true
	case "iptables-restore", "ip6tables-restore", "iptables-legacy-restore", "iptables-nft-restore":
		s.a.add("firewall.restore", FamilyFirewall, Medium, "replaces the firewall rules ("+name+")", ex)
		return true
	case "nft":
		if l := strings.Join(args, " "); nftDestroy.MatchString(l) {
			s.a.add("firewall.nft", FamilyFirewall, High, "flushes or deletes firewall rules (nft)", ex)
		} else if (strings.Contains(l, "add rule") || strings.Contains(l, "insert rule")) && strings.Contains(l, "accept") {
			s.a.add("firewall.open", FamilyFirewall, Medium, "adds a firewall rule that lets traffic in (nft)", ex)
		}
		return true
	case "ufw":
		if ops := operands(args); len(ops) > 0 && (ops[0] == "disable" || ops[0] == "reset" || (ops[0] == "default" && slices.Contains(ops, "allow"))) {
			s.a.add("firewall.ufw", FamilyFirewall, High, "turns off or resets the firewall (ufw "+ops[0]+")", ex)
		}
		return true
	case "firewall-cmd":
		for _, a := range args {
			if strings.HasPrefix(a, "--set-default-zone=trusted") || a == "--panic-off" || strings.HasPrefix(a, "--add-rich-rule") && strings.Contains(strings.ToLower(strings.Join(args, " ")), "accept") {
				s.a.add("firewall.firewalld", FamilyFirewall, High, "opens the firewall (firewall-cmd "+a+")", ex)
			}
		}
		return true
	case "setenforce":
		if hasAny(args, "0", "Permissive", "permissive") {
			s.a.add("firewall.selinux", FamilyFirewall, High, "switches SELinux off (setenforce 0)", ex)
		}
		return true
	case "aa-teardown", "aa-disable", "aa-complain":
		s.a.add("firewall.apparmor", FamilyFirewall, High, "switches AppArmor protection off ("+name+")", ex)
		return true
	case "pfctl":
		if hasAny(args, "-d", "-F", "-Fa") {
			s.a.add("firewall.pf", FamilyFirewall, High, "disables or flushes the pf firewall", ex)
		}
		return true
	case "netsh":
		if l := strings.ToLower(strings.Join(args, " ")); strings.Contains(l, "firewall") && strings.Contains(l, "off") {
			s.a.add("firewall.netsh", FamilyFirewall, High, "turns the Windows firewall off", ex)
		}
		return true
	case "git":
		s.git(args, ex)
		return false
	case "docker", "podman", "nerdctl", "buildah":
		s.engine(name, args, ex)
		return false
	case "kubectl", "oc":
		s.kubectl(name, args, ex)
		return false
	case "helm":
		if ops := operands(args); len(ops) > 0 && (ops[0] == "uninstall" || ops[0] == "delete" || ops[0] == "del") {
			s.a.add("container.helm-uninstall", FamilyContainer, Medium, "uninstalls a Helm release", ex)
		}
		return false
	case "lvremove", "vgremove", "pvremove", "lvreduce", "vgreduce", "pvmove", "lvconvert":
		s.a.add("disk.lvm", FamilyDisk, Critical, "removes or shrinks LVM volumes ("+name+")", ex)
		return true
	case "lvresize", "lvextend":
		if slices.ContainsFunc(args, func(a string) bool {
			return strings.HasPrefix(a, "-L-") || strings.HasPrefix(a, "--size=-") || a == "-L"
		}) {
			s.a.add("disk.lvm", FamilyDisk, High, "resizes an LVM volume ("+name+")", ex)
		}
		return true
	case "zfs":
		if ops := operands(args); len(ops) > 0 && (ops[0] == "destroy" || ops[0] == "rollback" || ops[0] == "receive" && hasAny(args, "-F")) {
			s.a.add("disk.zfs", FamilyDisk, Critical, "destroys or rolls back ZFS datasets (zfs "+ops[0]+")", ex)
		}
		return true
	case "zpool":
		if ops := operands(args); len(ops) > 0 && slices.Contains([]string{"destroy", "labelclear", "create", "split", "remove", "detach", "offline", "replace", "export", "reguid", "initialize", "trim"}, ops[0]) {
			s.a.add("disk.zpool", FamilyDisk, Critical, "changes or destroys a ZFS pool (zpool "+ops[0]+")", ex)
		}
		return true
	case "hdparm":
		for _, a := range args {
			if strings.HasPrefix(a, "--security-") || strings.HasPrefix(a, "--trim-sector") || strings.HasPrefix(a, "--write-sector") ||
				strings.HasPrefix(a, "--make-bad-sector") || a == "--fwdownload" || strings.HasPrefix(a, "--fwdownload") || a == "--dco-restore" ||
				a == "-N" || a == "--yes-i-know-what-i-am-doing" || a == "--please-destroy-my-drive" {
				s.a.add("disk.hdparm", FamilyDisk, Critical, "erases or reprograms a disk with hdparm ("+a+")", ex)
				return true
			}
		}
		return true
	case "nvme":
		if ops := operands(args); len(ops) > 0 && slices.Contains([]string{"format", "sanitize", "delete-ns", "detach-ns", "fw-download", "fw-commit", "write-zeroes"}, ops[0]) {
			s.a.add("disk.nvme", FamilyDisk, Critical, "erases or reprograms an NVMe drive (nvme "+ops[0]+")", ex)
		}
		return true
	case "sg_format", "sg_sanitize", "sg_unmap", "sg_write_same":
		s.a.add("disk.sg", FamilyDisk, Critical, "erases a disk ("+name+")", ex)
		return true
	case "cryptsetup":
		if ops := operands(args); len(ops) > 0 && slices.Contains([]string{"luksFormat", "erase", "luksErase", "luksKillSlot", "luksRemoveKey", "reencrypt", "format"}, ops[0]) {
			s.a.add("disk.cryptsetup", FamilyDisk, Critical, "formats or erases an encrypted volume (cryptsetup "+ops[0]+")", ex)
		}
		return true
	case "dmsetup":
		if ops := operands(args); len(ops) > 0 && (ops[0] == "remove_all" || ops[0] == "remove" || ops[0] == "wipe_table" || ops[0] == "clear") {
			s.a.add("disk.dmsetup", FamilyDisk, High, "removes device-mapper devices (dmsetup "+ops[0]+")", ex)
		}
		return true
	case "mdadm":
		if hasAny(args, "--zero-superblock", "--stop", "-S", "--remove", "--fail", "-f", "--create", "-C") {
			s.a.add("disk.mdadm", FamilyDisk, High, "stops, wipes or rebuilds a RAID array (mdadm)", ex)
		}
		return true
	case "btrfs":
		l := strings.Join(operands(args), " ")
		if strings.Contains(l, "device delete") || strings.Contains(l, "device remove") || strings.Contains(l, "subvolume delete") ||
			strings.Contains(l, "filesystem resize -") || strings.HasPrefix(l, "check --repair") || strings.Contains(l, "rescue") {
			s.a.add("disk.btrfs", FamilyDisk, High, "removes btrfs devices or subvolumes", ex)
		}
		return true
	case "swapoff":
		s.a.add("disk.swapoff", FamilyDisk, Medium, "turns swap off", ex)
		return true
	case "loginctl":
		if ops := operands(args); len(ops) > 0 {
			switch ops[0] {
			case "terminate-user", "terminate-session", "terminate-seat", "kill-user", "kill-session", "lock-sessions", "lock-session", "disable-linger":
				s.a.add("kill.loginctl", FamilyKill, High, "ends or locks login sessions (loginctl "+ops[0]+")", ex)
			case "poweroff", "reboot", "suspend", "hibernate", "halt":
				s.a.add("power.loginctl", FamilyPower, High, "powers off or suspends the machine (loginctl "+ops[0]+")", ex)
			case "enable-linger":
				s.a.add("persistence.linger", FamilyPersistence, Medium, "lets a user's services run after logout (loginctl enable-linger)", ex)
			}
		}
		return true
	case "gh":
		if l := strings.Join(args, " "); strings.HasPrefix(l, "auth token") || strings.Contains(l, "--show-token") || strings.HasPrefix(l, "auth git-credential") {
			s.a.add("credentials.gh-token", FamilyCredentials, High, "prints the GitHub token (gh auth)", ex)
		}
		if ops := operands(args); len(ops) >= 2 && ops[0] == "repo" && ops[1] == "delete" {
			s.a.add("git.repo-delete", FamilyGit, High, "deletes a GitHub repository", ex)
		}
		return false
	case "aws":
		l := strings.Join(args, " ")
		if strings.Contains(l, "configure get") || strings.Contains(l, "configure export-credentials") || strings.Contains(l, "export-credentials") ||
			strings.Contains(l, "get-session-token") || strings.Contains(l, "secretsmanager get-secret-value") || strings.Contains(l, "ssm get-parameter") && strings.Contains(l, "--with-decryption") {
			s.a.add("credentials.aws", FamilyCredentials, High, "reads AWS credentials or secrets", ex)
		}
		if strings.Contains(l, "s3 rm") && hasAny(args, "--recursive") || strings.Contains(l, "s3 rb") || strings.Contains(l, "delete-bucket") || strings.Contains(l, "terminate-instances") {
			s.a.add("container.cloud-delete", FamilyContainer, High, "deletes cloud resources (aws)", ex)
		}
		return false
	case "gcloud":
		if l := strings.Join(args, " "); strings.Contains(l, "print-access-token") || strings.Contains(l, "print-identity-token") || strings.Contains(l, "secrets versions access") {
			s.a.add("credentials.gcloud", FamilyCredentials, High, "prints Google Cloud credentials", ex)
		}
		return false
	case "az":
		if l := strings.Join(args, " "); strings.Contains(l, "get-access-token") || strings.Contains(l, "keyvault secret show") {
			s.a.add("credentials.azure", FamilyCredentials, High, "prints Azure credentials", ex)
		}
		return false
	case "vault":
		if ops := operands(args); len(ops) > 0 && (ops[0] == "read" || ops[0] == "kv" || ops[0] == "print") {
			s.a.add("credentials.vault", FamilyCredentials, High, "reads secrets from Vault", ex)
		}
		return false
	case "security":
		if ops := operands(args); len(ops) > 0 && strings.HasPrefix(ops[0], "find-") && strings.Contains(ops[0], "password") || hasAny(args, "dump-keychain") {
			s.a.add("credentials.keychain", FamilyCredentials, High, "reads passwords from the macOS keychain", ex)
		}
		return false
	case "secret-tool":
		if ops := operands(args); len(ops) > 0 && (ops[0] == "lookup" || ops[0] == "search") {
			s.a.add("credentials.keyring", FamilyCredentials, High, "reads secrets from the keyring (secret-tool)", ex)
		}
		return false
	case "pass", "gopass":
		if ops := operands(args); len(ops) > 0 && (ops[0] == "show" || ops[0] == "cat" || !strings.HasPrefix(ops[0], "-") && ops[0] != "ls" && ops[0] != "list" && ops[0] != "insert" && ops[0] != "generate" && ops[0] != "init") {
			s.a.add("credentials.pass", FamilyCredentials, High, "reads a password from the password store", ex)
		}
		return false
	case "gpg", "gpg2":
		if hasAny(args, "--export-secret-keys", "--export-secret-subkeys", "--export-ssh-key") {
			s.a.add("credentials.gpg-export", FamilyCredentials, High, "exports secret GPG keys", ex)
		}
		if hasAny(args, "--delete-secret-keys", "--delete-secret-and-public-key") {
			s.a.add("credentials.gpg-delete", FamilyCredentials, High, "deletes secret GPG keys", ex)
		}
		return false
	case "npm", "yarn", "pnpm":
		if ops := operands(args); len(ops) >= 2 && ops[0] == "config" && ops[1] == "get" && slices.ContainsFunc(ops[2:], func(o string) bool { return strings.Contains(o, "auth") || strings.Contains(o, "token") }) {
			s.a.add("credentials.npm", FamilyCredentials, High, "prints the npm registry token", ex)
		}
		return false
	}
	return false
}

var histVars = set("HISTFILE", "HISTSIZE", "HISTFILESIZE", "HISTCONTROL", "SAVEHIST", "HISTORY")

func isNullDevice(a string) bool { return a == "/dev/null" }

// chdir follows cd: relative paths that come later start from the new directory.
func (s *scope) chdir(args []string) {
	ops := operands(args)
	target := "~"
	if len(ops) > 0 {
		target = ops[0]
	}
	s.moved = true
	switch {
	case target == "-" || strings.Contains(target, dynamic):
		s.cwd = ""
	case s.cwd == "" && !strings.HasPrefix(target, "/") && !strings.HasPrefix(target, "~"):
		s.cwd = ""
	default:
		s.cwd = joinPath(s.cwd, target)
	}
}

func (s *scope) iptables(name string, args []string, ex string) {
	for i, a := range args {
		switch {
		case a == "-F" || a == "--flush" || a == "-X" || a == "--delete-chain" || strings.HasPrefix(a, "-F") && len(a) == 2:
			s.a.add("firewall.flush", FamilyFirewall, High, "flushes firewall rules ("+name+" "+a+")", ex)
			return
		case (a == "-P" || a == "--policy") && i+2 < len(args) && strings.EqualFold(args[i+2], "ACCEPT"):
			s.a.add("firewall.policy-accept", FamilyFirewall, High, "sets a firewall chain to accept everything ("+name+" -P "+args[i+1]+" ACCEPT)", ex)
			return
		case (a == "-A" || a == "-I" || a == "--append" || a == "--insert") && i+1 < len(args) && strings.EqualFold(args[i+1], "INPUT") && slices.ContainsFunc(args, func(x string) bool { return strings.EqualFold(x, "ACCEPT") }):
			s.a.add("firewall.open", FamilyFirewall, Medium, "adds a firewall rule that lets traffic in ("+name+" "+a+" INPUT … ACCEPT)", ex)
			return
		}
	}
}

// git flags history rewriting and force pushes, and reset/clean of a tree outside a project.
func (s *scope) git(args []string, ex string) {
	var dir string
	sub := -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case (a == "-C" || a == "--git-dir" || a == "--work-tree") && i+1 < len(args):
			dir = args[i+1]
			i++
		case a == "-c" || a == "--namespace" || a == "--exec-path":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			sub = i
		}
		if sub >= 0 {
			break
		}
	}
	if sub < 0 {
		return
	}
	rest := args[sub+1:]
	where := dir
	if where == "" {
		where = s.cwd
	}
	outside := false
	if where != "" {
		switch c, _ := s.worst(where); c {
		case pathRoot, pathHome, pathSystemTop, pathSystemSub, pathUserHome:
			outside = true
		}
	}
	switch args[sub] {
	case "push":
		for _, a := range rest {
			switch {
			case a == "-f" || a == "--force" || strings.HasPrefix(a, "--force-with-lease") || a == "--force-if-includes" || a == "--mirror" ||
				len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a, 'f'):
				s.a.add("git.force-push", FamilyGit, High, "force-pushes, overwriting the remote's history ("+a+")", ex)
				return
			case a == "--delete" || a == "-d" || a == "--prune":
				s.a.add("git.push-delete", FamilyGit, High, "deletes remote branches or tags ("+a+")", ex)
				return
			case strings.HasPrefix(a, "+") && len(a) > 1:
				s.a.add("git.force-push", FamilyGit, High, "force-pushes a refspec ("+a+")", ex)
				return
			case strings.HasPrefix(a, ":") && len(a) > 1:
				s.a.add("git.push-delete", FamilyGit, High, "deletes a remote branch ("+a+")", ex)
				return
			}
		}
	case "reset":
		if hasAny(rest, "--hard", "--merge", "--keep") {
			sev := Medium
			if outside {
				sev = High
			}
			s.a.add("git.reset-hard", FamilyGit, sev, "throws away uncommitted work (git reset --hard)", ex)
		}
	case "clean":
		force, dirs := false, false
		for _, a := range rest {
			if a == "--force" || len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a, 'f') {
				force = true
			}
			if len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsAny(a, "dxX") {
				dirs = true
			}
		}
		if force && !outside && scopedPathspecs(rest) {
			break // git clean -fd build/: like rm -rf build
		}
		if force {
			sev := Medium
			if outside && dirs {
				sev = High
			}
			s.a.add("git.clean", FamilyGit, sev, "deletes untracked files (git clean)", ex)
		}
	case "checkout", "restore":
		if slices.Contains(rest, "--") && slices.ContainsFunc(rest, func(a string) bool { return a == "." || a == "*" }) && outside {
			s.a.add("git.checkout-all", FamilyGit, Medium, "throws away local changes", ex)
		}
	case "reflog":
		if len(rest) > 0 && rest[0] == "expire" && slices.ContainsFunc(rest, func(a string) bool { return strings.HasPrefix(a, "--expire") }) {
			s.a.add("git.reflog-expire", FamilyGit, High, "erases the reflog (lost commits can no longer be recovered)", ex)
		}
	case "gc":
		if slices.ContainsFunc(rest, func(a string) bool { return a == "--prune=now" || a == "--prune=all" }) {
			s.a.add("git.gc-prune", FamilyGit, Medium, "prunes unreachable commits now", ex)
		}
	case "filter-branch", "filter-repo":
		s.a.add("git.rewrite", FamilyGit, High, "rewrites the repository's history (git "+args[sub]+")", ex)
	case "update-ref":
		if hasAny(rest, "-d") {
			s.a.add("git.update-ref", FamilyGit, Medium, "deletes a ref", ex)
		}
	case "stash":
		if len(rest) > 0 && (rest[0] == "clear" || rest[0] == "drop") {
			s.a.add("git.stash-clear", FamilyGit, Medium, "throws away stashed work (git stash "+rest[0]+")", ex)
		}
	case "branch":
		if hasAny(rest, "-D") || hasAny(rest, "--delete") && hasAny(rest, "--force") {
			s.a.add("git.branch-delete", FamilyGit, Low, "force-deletes a branch", ex)
		}
	}
}

// hostMount reports whether a bind source names the host's root or a sensitive host path.
func hostMount(src string) (critical, risky bool) {
	src = strings.TrimSpace(src)
	if src == "" || strings.Contains(src, dynamic) {
		return false, false
	}
	c := classify(path.Clean(src))
	switch {
	case c == pathRoot:
		return true, true
	case strings.Contains(src, "docker.sock") || strings.Contains(src, "podman.sock") || strings.Contains(src, "containerd.sock"):
		return true, true
	case c == pathSystemTop || c == pathSystemSub || c == pathHome || c == pathUserHome:
		return false, true
	}
	return false, false
}

// engine flags destructive container-engine commands and containers that reach into the host.
func (s *scope) engine(name string, args []string, ex string) {
	ops := operands(args)
	if len(ops) == 0 {
		return
	}
	verb := ops[0]
	if verb == "container" || verb == "image" || verb == "volume" || verb == "system" || verb == "network" || verb == "compose" || verb == "builder" {
		if len(ops) > 1 {
			verb = ops[0] + " " + ops[1]
		}
	}
	all := slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, dynamic) }) || hasAny(args, "-a", "--all", "-af", "-fa")
	switch verb {
	case "system reset":
		s.a.add("container.system-reset", FamilyContainer, Critical, "deletes every container, image and volume ("+name+" system reset)", ex)
	case "system prune", "volume prune", "volume rm", "container prune", "image prune", "builder prune":
		sev := Medium
		if verb == "volume rm" || verb == "volume prune" || all || hasAny(args, "--volumes") {
			sev = High
		}
		s.a.add("container.prune", FamilyContainer, sev, "deletes containers, images or volumes ("+name+" "+verb+")", ex)
	case "rm", "container rm", "rmi", "image rm", "kill", "container kill":
		if hasAny(args, "-f", "--force", "-v", "--volumes") || all || len(ops) > 3 {
			s.a.add("container.rm", FamilyContainer, Medium, "force-removes containers or images ("+name+" "+verb+")", ex)
		}
	case "compose down", "compose rm":
		if hasAny(args, "-v", "--volumes") {
			s.a.add("container.compose-down", FamilyContainer, High, "deletes the project's volumes ("+name+" compose down -v)", ex)
		}
	case "run", "create", "container run", "container create", "exec":
		s.containerRun(name, args, ex)
	}
}

// containerRun flags containers started with the host's root, its engine socket, its
// namespaces or full privileges.
func (s *scope) containerRun(name string, args []string, ex string) {
	flag := func(id string, sev Severity, why string) {
		s.a.add("container."+id, FamilyContainer, sev, why+" ("+name+")", ex)
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := ""
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "--") {
			a, val = k, v
		} else if i+1 < len(args) {
			val = args[i+1]
		}
		switch a {
		case "-v", "--volume":
			src, _, _ := strings.Cut(val, ":")
			if crit, risky := hostMount(src); crit {
				flag("host-root-mount", Critical, "mounts the host's root directory or engine socket into a container")
			} else if risky {
				flag("host-mount", High, "mounts a system directory of the host into a container")
			}
		case "--mount":
			for _, kv := range strings.Split(val, ",") {
				if k, v, ok := strings.Cut(kv, "="); ok && (k == "source" || k == "src") {
					if crit, risky := hostMount(v); crit {
						flag("host-root-mount", Critical, "mounts the host's root directory or engine socket into a container")
					} else if risky {
						flag("host-mount", High, "mounts a system directory of the host into a container")
					}
				}
			}
		case "--privileged":
			flag("privileged", Critical, "runs a privileged container (full access to the host)")
		case "--pid", "--ipc", "--uts", "--userns", "--cgroupns":
			if val == "host" {
				flag("host-namespace", High, "shares a namespace of the host ("+a+"=host)")
			}
		case "--net", "--network":
			if val == "host" {
				flag("host-network", Medium, "shares the host's network (--network host)")
			}
		case "--cap-add":
			if u := strings.ToUpper(val); u == "ALL" || strings.Contains(u, "SYS_ADMIN") || strings.Contains(u, "SYS_MODULE") || strings.Contains(u, "SYS_PTRACE") || strings.Contains(u, "DAC_READ_SEARCH") {
				flag("cap-add", High, "gives a container powerful capabilities ("+val+")")
			}
		case "--security-opt":
			if strings.Contains(val, "unconfined") || strings.Contains(val, "label=disable") || strings.Contains(val, "label:disable") {
				flag("unconfined", High, "turns off a container's security profile ("+val+")")
			}
		case "--device":
			if isDevice(strings.SplitN(val, ":", 2)[0]) {
				flag("device", High, "gives a container a raw disk device ("+val+")")
			}
		}
	}
}

func (s *scope) kubectl(name string, args []string, ex string) {
	ops := operands(args)
	if len(ops) == 0 {
		return
	}
	l := strings.Join(args, " ")
	switch ops[0] {
	case "delete":
		sev := Medium
		if hasAny(args, "--all", "-A", "--all-namespaces") || len(ops) > 1 && (ops[1] == "ns" || ops[1] == "namespace" || ops[1] == "namespaces" || ops[1] == "pv" || ops[1] == "pvc" || ops[1] == "crd" || ops[1] == "node" || ops[1] == "nodes") {
			sev = High
		}
		s.a.add("container.kubectl-delete", FamilyContainer, sev, "deletes Kubernetes resources ("+name+" "+strings.Join(ops, " ")+")", ex)
	case "drain", "cordon":
		s.a.add("container.kubectl-drain", FamilyContainer, Medium, "takes a Kubernetes node out of service", ex)
	case "get", "describe":
		if len(ops) > 1 && (ops[1] == "secret" || ops[1] == "secrets" || strings.HasPrefix(ops[1], "secret/")) && (strings.Contains(l, "-o") || ops[0] == "describe") {
			s.a.add("credentials.kube-secret", FamilyCredentials, High, "reads Kubernetes secrets", ex)
		}
	case "config":
		if len(ops) > 1 && ops[1] == "view" && hasAny(args, "--raw", "--flatten") {
			s.a.add("credentials.kubeconfig", FamilyCredentials, High, "prints the kubeconfig with its credentials", ex)
		}
	}
}

// rsyncDelete: rsync --delete into a home or system directory wipes what the source lacks.
func (s *scope) rsyncDelete(args []string, ex string) {
	del := slices.ContainsFunc(args, func(a string) bool {
		return strings.HasPrefix(a, "--delete") || a == "--remove-source-files" || a == "--del"
	})
	if !del {
		return
	}
	ops := operands(args)
	if len(ops) < 2 {
		return
	}
	dst := ops[len(ops)-1]
	if i := strings.Index(dst, ":"); i > 0 && !strings.HasPrefix(dst, "/") && !strings.HasPrefix(dst, "~") {
		dst = dst[i+1:] // host:path — still someone's directory
		if dst == "" {
			dst = "~"
		}
	}
	switch c, dst := s.worst(dst); c {
	case pathRoot, pathHome, pathSystemTop:
		s.a.add("rsync.delete-root", FamilyDestructive, Critical, "rsync --delete into "+describe(dst, c)+" deletes whatever the source lacks", ex)
	case pathSystemSub, pathUserHome, pathDynamicRoot, pathCwdAll:
		s.a.add("rsync.delete-system", FamilyDestructive, High, "rsync --delete into "+describe(dst, c)+" deletes whatever the source lacks", ex)
	case pathDynamic, pathSystemDeep:
		s.a.add("rsync.delete-risky", FamilyDestructive, Medium, "rsync --delete into "+describe(dst, c), ex)
	}
}

// recursiveReads marks what archivers, recursive copies and recursive searches read as whole
// trees, for the file guard, and flags such reads of secret directories.
func (s *scope) recursiveReads(name string, args []string) {
	var srcs []string
	switch name {
	case "tar", "bsdtar":
		create := false
		for i, a := range args {
			if a == "-c" || a == "--create" || a == "-r" || a == "--append" || a == "-u" || a == "--update" ||
				i == 0 && !strings.HasPrefix(a, "-") && strings.ContainsAny(a, "cru") || len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a, 'c') {
				create = true
			}
		}
		if !create {
			return
		}
		skip := map[int]bool{}
		for i, a := range args {
			if (a == "-f" || a == "--file" || a == "-C" || a == "--directory" || a == "-T" || a == "-X" || a == "--exclude") && i+1 < len(args) {
				skip[i+1] = true
			}
			if i == 0 && !strings.HasPrefix(a, "-") && strings.Contains(a, "f") && len(args) > 1 {
				skip[1] = true
			}
			if len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.HasSuffix(a, "f") && i+1 < len(args) {
				skip[i+1] = true
			}
		}
		for i, a := range args {
			if i == 0 && !strings.HasPrefix(a, "-") && strings.ContainsAny(a, "cru") || skip[i] || strings.HasPrefix(a, "-") {
				continue
			}
			srcs = append(srcs, a)
		}
	case "zip", "7z", "7za", "rar":
		if name == "zip" && !hasShortFlag(args, 'r') && !hasAny(args, "--recurse-paths") {
			return
		}
		ops := operands(args)
		if len(ops) > 1 {
			srcs = ops[1:]
			if name != "zip" && len(ops) > 2 {
				srcs = ops[2:]
			}
		}
	case "mv":
		// Moving a directory of secrets elsewhere exposes it like a copy does.
		if ops := operands(args); len(ops) > 1 {
			srcs = ops[:len(ops)-1]
		}
	case "cp", "scp", "rsync":
		if !(hasShortFlag(args, 'r') || hasShortFlag(args, 'R') || hasShortFlag(args, 'a') || hasAny(args, "--recursive", "--archive")) {
			return
		}
		ops := operands(args)
		if len(ops) > 1 {
			srcs = ops[:len(ops)-1]
		}
	case "grep", "egrep", "fgrep":
		if !(hasShortFlag(args, 'r') || hasShortFlag(args, 'R') || hasAny(args, "--recursive", "--dereference-recursive")) {
			return
		}
		ops := operands(args)
		if len(ops) > 1 {
			srcs = ops[1:]
		}
	case "rg", "ag", "ack":
		ops := operands(args)
		if len(ops) > 1 {
			srcs = ops[1:]
		}
	case "base64", "xxd", "od", "hexdump", "strings", "cat", "less", "more", "head", "tail", "gzip", "bzip2", "xz", "zstd":
		return
	default:
		return
	}
	for _, src := range srcs {
		s.file(src, false, true)
		if p, ok := s.fileWord(src); ok {
			for _, r := range s.resolve(p) {
				if secretDir.MatchString(strings.TrimRight(r, "/")) {
					s.a.add("credentials.secret-dir", FamilyCredentials, High, "reads a whole directory of secrets ("+r+")", s.a.cur)
				}
			}
		}
	}
}

// secretDir matches directories that hold secrets as a whole.
var secretDir = regexp.MustCompile(`(?:^|/)(?:~|\.ssh|\.gnupg|\.aws|\.kube|\.docker|\.azure|\.password-store|\.config/gcloud|\.config/gh|/etc/ssl/private|\.local/share/keyrings)$`)

var nftDestroy = regexp.MustCompile(`\b(?:flush|delete|destroy)\b`)

// socatAddr finds the file of a socat address (UNIX-CONNECT:/path,opts; OPEN:/path …).
var socatAddr = regexp.MustCompile(`(?i)^(?:unix(?:-connect|-listen|-sendto|-recvfrom|-recv|-client)?|open|file|create|gopen|pipe|named)\s*:([^,]+)`)

// socketPaths records the unix sockets and files that socat, nc -U and curl --unix-socket
// talk to, for the file guard (the driver's socket is protected in every desktop).
func (s *scope) socketPaths(name string, args []string) {
	switch name {
	case "socat":
		for _, a := range args {
			if m := socatAddr.FindStringSubmatch(a); m != nil {
				s.file(m[1], false, false)
			}
		}
	case "nc", "ncat", "netcat", "nc.openbsd", "nc.traditional":
		if hasAny(args, "-U", "--unixsock") || hasShortFlag(args, 'U') {
			for _, o := range operands(args) {
				s.file(o, false, false)
			}
		}
	case "curl":
		for i, a := range args {
			if (a == "--unix-socket" || a == "--abstract-unix-socket") && i+1 < len(args) {
				s.file(args[i+1], false, false)
			}
		}
	}
}

// engineSocketPath matches the API sockets of container engines: whoever talks to one can
// start a privileged container with the host's root mounted.
var engineSocketPath = regexp.MustCompile(`(?:docker|podman|containerd|crio|cri-dockerd|buildkitd)\.sock\b`)

// engineSocket flags a command that names a container engine's socket (curl --unix-socket,
// socat, nc -U, docker -H unix://…, a copy or mount of it).
func (s *scope) engineSocket(args []string, ex string) {
	for _, a := range args {
		if engineSocketPath.MatchString(a) {
			s.a.add("container.engine-socket", FamilyContainer, High,
				"talks to a container engine's socket (as good as root on this machine)", ex)
			return
		}
	}
}

// sedInPlace: sed -i writes the files it edits.
func (s *scope) sedInPlace(args []string, ex string) {
	inPlace, script := false, false
	for _, a := range args {
		if a == "-i" || strings.HasPrefix(a, "-i") && !strings.HasPrefix(a, "--") || strings.HasPrefix(a, "--in-place") ||
			len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a, 'i') {
			inPlace = true
		}
		if a == "-e" || a == "--expression" || a == "-f" || a == "--file" || strings.HasPrefix(a, "--expression=") {
			script = true
		}
	}
	if !inPlace {
		return
	}
	ops := operands(args)
	skipFirst := !script
	for i, o := range ops {
		if i == 0 && skipFirst {
			continue
		}
		s.writeTarget(o, "sed -i edits", ex)
	}
}

// cmdVars are environment variables whose value a program runs as a command, and codeVars
// those that make it load code from a file.
var (
	cmdVars  = set("PAGER", "GIT_PAGER", "MANPAGER", "SYSTEMD_PAGER", "EDITOR", "VISUAL", "GIT_EDITOR", "SVN_EDITOR", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "SSH_ASKPASS", "SUDO_ASKPASS", "LESSOPEN", "LESSCLOSE", "PROMPT_COMMAND", "BROWSER", "GIT_PROXY_COMMAND")
	codeVars = set("BASH_ENV", "ENV", "LD_PRELOAD", "LD_AUDIT", "PERL5OPT", "NODE_OPTIONS", "RUBYOPT", "PYTHONSTARTUP", "PYTHONINSPECT", "ZDOTDIR", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_PARAMETERS", "DYLD_INSERT_LIBRARIES", "LD_LIBRARY_PATH", "PERL5LIB", "PYTHONPATH")
)

// envVar checks one environment variable a command is given (VAR=x cmd, env VAR=x cmd,
// export VAR=x): a command or code it makes the program run, and the shell history.
func (s *scope) envVar(name, val, ex string) {
	switch {
	case cmdVars[name] && val != "" && !strings.Contains(val, dynamic):
		v := strings.TrimPrefix(strings.TrimSpace(val), "|")
		if f := strings.Fields(v); len(f) > 0 && !safePagers[cmdName(f[0])] {
			s.a.add("indirect.env-command", FamilyIndirect, Medium, "makes programs run a command through $"+name, ex)
		}
		s.nested(v, scriptTyped)
	case codeVars[name] && val != "":
		sev := High
		if name == "LD_LIBRARY_PATH" || name == "PYTHONPATH" || name == "PERL5LIB" {
			sev = Medium
		}
		s.a.add("indirect.env-code", FamilyIndirect, sev, "makes programs load code from "+excerpt(val)+" ($"+name+")", ex)
	case histVars[name] && (val == "" || val == "0" || val == "/dev/null"):
		s.a.add("log-wipe.histvar", FamilyLogWipe, High, "turns off the shell history ($"+name+")", ex)
	}
}

var safePagers = set("less", "more", "cat", "most", "vim", "vi", "nvim", "nano", "emacs", "code", "subl", "delta", "bat", "true", "firefox", "chromium", "xdg-open")
