package guard

import (
	"path"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// call analyses one simple command, through its wrappers and nested scripts.
func (s *scope) call(c *syntax.CallExpr) {
	argv := s.argv(c)
	for _, as := range c.Assigns {
		standalone := len(c.Args) == 0
		if !standalone && as.Name != nil && as.Name.Value == "IFS" && len(argv) > 0 {
			if n := cmdName(argv[0]); n == "read" || n == "mapfile" || n == "readarray" {
				continue // IFS= read -r line: the usual idiom
			}
		}
		s.assign(as, standalone, c)
	}
	if len(argv) == 0 {
		return
	}
	prev := s.a.cur
	defer func() { s.a.cur = prev }()
	s.a.cur = s.simple[c]
	if s.a.cur == "" {
		s.a.cur = render(argv, "")
	}
	s.a.cmds = append(s.a.cmds, s.a.cur)
	if target, ok := s.hashed[cmdName(argv[0])]; ok && !strings.Contains(argv[0], "/") {
		// hash -p /bin/rm ls; ls -rf ~ runs rm.
		argv = append([]string{target}, argv[1:]...)
	}
	if len(argv) > 0 && argv[0] == "set" {
		s.setPositional(argv[1:])
	}
	if text, ok := s.aliases[argv[0]]; ok {
		// alias ll='rm -rf'; ll ~ runs rm -rf ~.
		s.nested(text+" "+render(argv[1:], ""), scriptCommand)
	}
	ex := s.text(c)
	for _, a := range argv[1:] {
		s.file(a, false, false)
		s.wordRules(a, ex)
	}
	if _, changed := normalizeUnicode(argv[0]); changed || strings.ContainsFunc(strings.ReplaceAll(argv[0], dynamic, ""), isControl) {
		// $'\xe2\x80\x8b' and the like: hidden or look-alike characters spelled by escapes.
		s.a.add("unicode.command-name", FamilyUnicode, High, "the command name holds invisible, control or look-alike characters", ex)
	}
	for _, m := range wordMatches(argv[0]) {
		m.Excerpt = excerpt(ex)
		s.a.addMatch(m)
	}
	s.showsSecretVar(c, finalCommand(argv), ex)
	download, decode := s.substSources(c)
	privileged := false
	for range 16 {
		if len(argv) == 0 {
			return
		}
		name := argv[0]
		switch {
		case strings.Contains(name, dynamic) && download:
			s.a.add("remote-exec.subst", FamilyRemoteExec, Critical, "runs the output of a download as a command", ex)
		case strings.Contains(name, dynamic):
			s.a.add("obfuscation.dynamic-name", FamilyObfuscation, High, "the command name is only known at run time", ex)
		case strings.ContainsAny(name, "*?") || (strings.Contains(name, "[") && strings.Contains(name, "]") && name != "[" && name != "[["):
			s.a.add("obfuscation.glob-name", FamilyObfuscation, High, "the command name is a wildcard pattern", ex)
		}
		st := unwrap(argv)
		if n := cmdName(name); n == "xargs" || n == "parallel" {
			s.parallelism(n, argv[1:], ex)
		}
		if cmdName(name) == "env" {
			for _, a := range argv[1:] {
				if k, v, ok := strings.Cut(a, "="); ok && !strings.HasPrefix(a, "-") {
					s.envVar(k, v, ex)
				} else if !strings.HasPrefix(a, "-") {
					break
				}
			}
		}
		switch st.kind {
		case "privilege":
			if !privileged {
				s.a.add("privilege."+cmdName(name), FamilyPrivilege, High, "runs a command with elevated privileges ("+cmdName(name)+")", ex)
			}
			privileged = true
		case "shell", "eval", "watch", "remote", "runner":
			switch {
			case download:
				s.a.add("remote-exec.subst", FamilyRemoteExec, Critical, "downloads code and runs it", ex)
			case decode:
				s.a.add("encoded-exec.subst", FamilyEncodedExec, Critical, "decodes hidden code and runs it", ex)
			case strings.Contains(st.script, dynamic):
				s.a.add("obfuscation.dynamic-script", FamilyObfuscation, High, "runs a script that is only known at run time", ex)
			}
		}
		if st.note != "" {
			s.a.add("indirect."+cmdName(name), FamilyIndirect, st.sev(), st.note, ex)
		}
		if st.script != "" {
			s.nestedArgs(st.script, st.params)
		}
		if st.kind == "" {
			s.downloads(argv, ex)
			if networkCommand(argv) {
				s.substExfil(c, ex)
			}
			if isInterpreter(name) && download {
				s.a.add("remote-exec.subst", FamilyRemoteExec, Critical, "downloads code and runs it", ex)
			} else if isInterpreter(name) && decode {
				s.a.add("encoded-exec.subst", FamilyEncodedExec, Critical, "decodes hidden code and runs it", ex)
			}
			s.command(argv, ex)
			return
		}
		if st.kind == "xargs" && s.fed[c] {
			return // feedArgs judged the commands it runs, with their input
		}
		argv = st.next
	}
}

// substSources reports whether the command's $(…), `…` or <(…) run a download or a decoder.
func (s *scope) substSources(c *syntax.CallExpr) (download, decode bool) {
	for _, w := range c.Args {
		for _, p := range w.Parts {
			if _, ok := p.(*syntax.Lit); ok {
				continue
			}
			syntax.Walk(p, func(n syntax.Node) bool {
				if !s.a.spend(1) {
					return false
				}
				if ce, ok := n.(*syntax.CallExpr); ok && len(ce.Args) > 0 {
					if f := finalCommand(s.argv(ce)); len(f) > 0 {
						nm := cmdName(f[0])
						download = download || downloaders[nm] || networkTools[nm]
						decode = decode || decoders[nm]
					}
				}
				return true
			})
		}
	}
	return download, decode
}

// command applies the per-command rules to a command that is not a wrapper.
func (s *scope) command(argv []string, ex string) {
	name := cmdName(argv[0])
	args := argv[1:]
	s.callFunc(argv)
	if s.system(name, args, ex) {
		return
	}
	s.recursiveReads(name, args)
	s.exhaustionCommand(name, args, ex)
	s.extract(name, args, ex)
	s.inPlace(name, args, ex)
	s.taskRunner(name, args, ex)
	s.hostControl(name, args, ex)
	s.infra(name, args, ex)
	s.exposure(name, args, ex)
	s.socketPaths(name, args)
	s.engineSocket(args, ex)
	if networkCommand(argv) {
		s.exfiltration(argv, ex)
	}
	switch name {
	case "rm", "unlink", "rmdir", "shred", "srm", "trash", "trash-put":
		s.rm(name, args, ex)
	case "rimraf", "del", "del-cli", "rimraf.cmd":
		s.rm("rm", append([]string{"-rf"}, args...), ex)
	case "mv":
		s.mv(args, ex)
	case "cp", "install", "ln", "tee", "truncate", "rsync":
		for _, t := range writeOperands(name, args) {
			s.writeTarget(t, name+" writes into", ex)
		}
		if name == "rsync" {
			s.rsyncDelete(args, ex)
		}
	case "chmod", "chown", "chgrp":
		s.perms(name, args, ex)
	case "mkfs", "mke2fs", "mkswap", "wipefs", "blkdiscard", "fdisk", "sfdisk", "cfdisk", "parted", "gdisk", "sgdisk", "mkdosfs":
		if (name == "fdisk" || name == "sfdisk" || name == "parted") && hasAny(args, "-l", "--list", "print") {
			return
		}
		s.a.add("disk."+name, FamilyDisk, Critical, "formats, partitions or wipes a disk ("+name+")", ex)
	case "dd":
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "of="); ok {
				s.writeTarget(v, "dd writes onto", ex)
			}
		}
	case "reboot", "shutdown", "halt", "poweroff", "kexec":
		s.a.add("power."+name, FamilyPower, High, "reboots or powers off the machine ("+name+")", ex)
	case "init", "telinit":
		if len(args) > 0 && strings.Contains("06sS1", args[0]) && len(args[0]) == 1 {
			s.a.add("power.init", FamilyPower, High, "changes the run level (init "+args[0]+"), which stops or reboots the machine", ex)
		}
	case "systemctl", "service", "rc-service", "launchctl", "initctl", "sv":
		s.service(name, args, ex)
	case "kill":
		s.kill(args, ex)
	case "pkill", "killall", "skill", "slay", "killall5":
		sev := Medium
		if name == "killall5" {
			sev = Critical
		} else if hasAny(args, "-9", "-KILL", "-SIGKILL", "--signal=KILL", "-s9") || (slices.Contains(args, "-s") && hasAny(args, "KILL", "9", "SIGKILL")) {
			sev = High
		}
		if killsSession(args) && sev == Medium {
			sev = High // the desktop the agent works in lives on these
		}
		s.a.add("kill."+name, FamilyKill, sev, "kills processes by name ("+name+")", ex)
	case "setcap":
		for _, a := range args {
			if l := strings.ToLower(a); strings.Contains(l, "cap_setuid") || strings.Contains(l, "cap_setgid") || strings.Contains(l, "cap_sys_admin") ||
				strings.Contains(l, "cap_dac_") || strings.Contains(l, "cap_sys_ptrace") || strings.Contains(l, "cap_sys_module") || l == "all+ep" || strings.HasPrefix(l, "=ep") {
				s.a.add("privilege.setcap", FamilyPrivilege, High, "gives a program root powers through file capabilities ("+a+")", ex)
				return
			}
		}
	case "chattr":
		for _, t := range operands(args) {
			if c, t := s.worst(t); c >= pathSystemDeep {
				s.a.add("chattr.system", FamilyPermissions, Medium, "changes file attributes of "+describe(t, c), ex)
				return
			}
		}
	case "sysctl":
		if hasAny(args, "-w", "--write", "-p", "--load", "--system") || slices.ContainsFunc(operands(args), func(a string) bool { return strings.Contains(a, "=") }) {
			s.a.add("privilege.sysctl", FamilyPrivilege, Medium, "changes kernel settings (sysctl)", ex)
		}
	case "insmod", "modprobe", "rmmod", "kmod":
		if name == "modprobe" && hasAny(args, "-n", "--dry-run", "-c", "--showconfig", "--show-depends") {
			return
		}
		s.a.add("privilege.kernel-module", FamilyPrivilege, High, "loads or unloads kernel modules ("+name+")", ex)
	case "newgrp":
		s.a.add("privilege.newgrp", FamilyPrivilege, Medium, "starts a shell with another group", ex)
	case "mknod":
		if slices.Contains(args, "p") {
			return
		}
		s.a.add("disk.mknod", FamilyDisk, High, "creates a device file (mknod)", ex)
	case "crontab":
		if hasAny(args, "-l") && !hasAny(args, "-r", "-e", "-i") {
			return
		}
		s.a.add("persistence.crontab", FamilyPersistence, High, "changes a crontab (commands that run by themselves)", ex)
	case "visudo":
		s.a.add("persistence.visudo", FamilyPersistence, High, "edits the sudoers configuration", ex)
	case "useradd", "userdel", "usermod", "adduser", "deluser", "passwd", "chpasswd", "gpasswd", "groupadd", "groupmod", "vipw", "vigr":
		s.a.add("privilege.accounts", FamilyPrivilege, Medium, "changes user accounts or passwords ("+name+")", ex)
	case "nc", "ncat", "netcat", "nc.traditional", "nc.openbsd", "cryptcat":
		for _, a := range args {
			if a == "-c" || a == "--exec" || a == "--sh-exec" || a == "--lua-exec" ||
				(len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a, 'e')) {
				s.a.add("reverse.netcat", FamilyReverse, Critical, "connects a program to the network with "+name+" (reverse shell)", ex)
				return
			}
		}
	case "socat":
		for _, a := range args {
			if l := strings.ToLower(a); strings.Contains(l, "exec:") || strings.Contains(l, "system:") {
				s.a.add("reverse.socat", FamilyReverse, Critical, "connects a program to the network with socat", ex)
				return
			}
		}
	case "ztcp", "zsocket":
		s.a.add("reverse.ztcp", FamilyReverse, High, "opens a network connection from zsh ("+name+"), as reverse shells do", ex)
	case "zmodload":
		if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "zsh/net/") }) {
			s.a.add("reverse.zmodload", FamilyReverse, Medium, "loads zsh's network module (used to wire a shell to a socket)", ex)
		}
	case "find":
		s.find(args, ex)
	case "alias":
		for _, a := range args {
			if k, v, ok := strings.Cut(a, "="); ok {
				// Judged where it is used (expandAliases, or below in call), with the words
				// that follow it: alias c=crontab; c -l only lists.
				if len(s.aliases) < 32 {
					s.aliases[k] = v
				}
			}
		}
	default:
		if strings.HasPrefix(name, "mkfs.") {
			s.a.add("disk.mkfs", FamilyDisk, Critical, "formats a disk ("+name+")", ex)
			return
		}
		if name == "deno" && len(args) > 1 && args[0] == "eval" {
			s.interpreterCode(args[len(args)-1], ex) // deno eval [options] code
		}
		if strings.HasPrefix(name, "python") || otherInterps[name] {
			for i, a := range args {
				codeFlag := a == "-c" || a == "-e" || a == "-E" || a == "-r" || a == "--eval" || a == "-p" || a == "--print" ||
					len(a) > 2 && a[0] == '-' && a[1] != '-' && strings.HasSuffix(a, "c") && strings.HasPrefix(name, "python")
				if codeFlag && i+1 < len(args) {
					s.interpreterCode(args[i+1], ex)
				} else if v, ok := strings.CutPrefix(a, "--eval="); ok {
					s.interpreterCode(v, ex)
				}
			}
		}
		if strings.HasPrefix(argv[0], "/etc/init.d/") && hasAny(args, "stop", "restart", "force-reload") {
			s.a.add("service.initd", FamilyService, Medium, "stops or restarts a system service", ex)
		}
	}
}

// operands are the non-option arguments ("--" ends the options).
func operands(args []string) []string {
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i+1:]...)
		}
		if len(a) > 1 && a[0] == '-' {
			continue
		}
		out = append(out, a)
	}
	return out
}

func writeOperands(name string, args []string) []string {
	for i, a := range args {
		if (a == "-t" || a == "--target-directory") && i+1 < len(args) {
			return []string{args[i+1]}
		}
		if v, ok := strings.CutPrefix(a, "--target-directory="); ok {
			return []string{v}
		}
	}
	ops := operands(args)
	switch name {
	case "tee", "truncate":
		return ops
	}
	if len(ops) < 2 {
		return nil
	}
	return ops[len(ops)-1:]
}

func (s *scope) rm(name string, args []string, ex string) {
	recursive := false
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--no-preserve-root" {
			s.a.add("rm.no-preserve-root", FamilyDestructive, Critical, "disables rm's protection of /", ex)
		}
		if a == "--recursive" || (len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsAny(a, "rR")) {
			recursive = true
		}
	}
	for _, t := range operands(args) {
		for _, f := range s.resolve(t) {
			if isLogFile(f) || strings.HasSuffix(strings.TrimRight(f, "/*"), "/var/log") {
				s.a.add("log-wipe.delete", FamilyLogWipe, High, "deletes a history or log file ("+f+")", ex)
				break
			}
		}
		if name == "shred" && isDevice(t) {
			s.a.add("disk.shred", FamilyDisk, Critical, "overwrites a disk device", ex)
			continue
		}
		for _, f := range s.resolve(t) {
			// A shell's start-up file (~/.bashrc): the user's configuration. Git hooks and
			// autostart entries may go; deleting them plants nothing.
			if m := persistenceFile.FindString(f); m != "" && strings.HasPrefix(path.Base(f), ".") && !strings.Contains(f, ".git/") {
				s.a.add("rm.startup-file", FamilyDestructive, Medium, name+" deletes a file that runs at login or start-up ("+m+")", ex)
				break
			}
		}
		s.file(t, true, recursive)
		if recursive {
			for _, f := range s.resolve(t) {
				if secretDir.MatchString(strings.TrimRight(f, "/")) && !strings.HasSuffix(strings.TrimRight(f, "/"), "~") {
					s.a.add("rm.secret-dir", FamilyDestructive, High, "deletes a directory of keys or credentials ("+f+")", ex)
					break
				}
			}
		}
		c, t := s.worst(t)
		switch {
		case recursive && (c == pathRoot || c == pathHome || c == pathSystemTop):
			s.a.add("rm.root", FamilyDestructive, Critical, "recursively deletes "+describe(t, c), ex)
		case recursive && (c == pathSystemSub || c == pathUserHome || c == pathCwdAll || c == pathDynamicRoot):
			s.a.add("rm.system", FamilyDestructive, High, "recursively deletes "+describe(t, c), ex)
		case recursive && (c == pathSystemDeep || c == pathDynamic || c == pathHomeTop):
			s.a.add("rm.risky", FamilyDestructive, Medium, "recursively deletes "+describe(t, c), ex)
		case !recursive && c != pathRelative && c != pathOther && c != pathDynamic && c != pathCwdAll && c != pathHomeTop:
			s.a.add("rm.system-file", FamilyDestructive, High, "deletes "+describe(t, c), ex)
		case !recursive && (c == pathCwdAll || c == pathDynamic):
			s.a.add("rm.unknown", FamilyDestructive, Low, "deletes "+describe(t, c), ex)
		}
	}
}

func (s *scope) mv(args []string, ex string) {
	ops := operands(args)
	for _, t := range writeOperands("mv", args) {
		s.writeTarget(t, "mv moves files onto", ex)
	}
	for i, t := range ops {
		if i == len(ops)-1 && len(ops) > 1 {
			break
		}
		s.file(t, true, false)
		c, t := s.worst(t)
		switch c {
		case pathRoot, pathHome, pathSystemTop:
			s.a.add("mv.root", FamilyDestructive, Critical, "moves away "+describe(t, c), ex)
		case pathSystemSub, pathUserHome, pathDynamicRoot:
			s.a.add("mv.system", FamilyDestructive, High, "moves away "+describe(t, c), ex)
		}
	}
}

func (s *scope) perms(name string, args []string, ex string) {
	recursive := false
	var rest []string
	for _, a := range args {
		switch {
		case a == "-R" || a == "--recursive" || (len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a, 'R')):
			recursive = true
		case name == "chmod" && len(a) > 1 && a[0] == '-' && strings.Trim(a[1:], "rwxXst") == "":
			rest = append(rest, a) // chmod -w file: a mode, not an option
		case strings.HasPrefix(a, "-"):
			if strings.HasPrefix(a, "--reference") {
				rest = append(rest, "")
			}
		default:
			rest = append(rest, a)
		}
	}
	if len(rest) < 2 {
		return
	}
	mode, targets := rest[0], rest[1:]
	worldWritable, setuid := false, false
	if name == "chmod" {
		worldWritable, setuid = modeRisk(mode)
	}
	for _, t := range targets {
		c, t := s.worst(t)
		system := c == pathRoot || c == pathHome || c == pathSystemTop || c == pathSystemSub || c == pathSystemDeep || c == pathUserHome
		switch {
		case recursive && (c == pathRoot || c == pathHome || c == pathSystemTop):
			s.a.add(name+".recursive-root", FamilyPermissions, Critical, name+" -R on "+describe(t, c), ex)
		case recursive && system:
			s.a.add(name+".recursive-system", FamilyPermissions, High, name+" -R on "+describe(t, c), ex)
		case worldWritable && system:
			s.a.add("chmod.world-writable-system", FamilyPermissions, High, "makes "+describe(t, c)+" writable by everyone", ex)
		case worldWritable && recursive:
			s.a.add("chmod.world-writable-tree", FamilyPermissions, Medium, "makes a whole tree writable by everyone", ex)
		case name != "chmod" && system:
			s.a.add(name+".system", FamilyPermissions, Medium, name+" on "+describe(t, c), ex)
		case name == "chmod" && (c == pathRoot || c == pathHome || c == pathSystemTop || c == pathSystemSub || c == pathUserHome):
			s.a.add("chmod.system", FamilyPermissions, Medium, "changes the permissions of "+describe(t, c), ex)
		}
	}
	if setuid {
		s.a.add("chmod.setuid", FamilyPermissions, High, "sets the setuid/setgid bit (runs as the file's owner)", ex)
	}
}

// modeRisk reads a chmod mode: does it make files world-writable, or set setuid/setgid?
func modeRisk(mode string) (worldWritable, setuid bool) {
	if mode != "" && strings.Trim(mode, "01234567") == "" {
		last := mode[len(mode)-1]
		worldWritable = last == '2' || last == '3' || last == '6' || last == '7'
		if len(mode) >= 4 {
			first := mode[len(mode)-4]
			setuid = first == '2' || first == '3' || first == '4' || first == '5' || first == '6' || first == '7'
		}
		return worldWritable, setuid
	}
	for _, clause := range strings.Split(mode, ",") {
		i := strings.IndexAny(clause, "+=")
		if i < 0 {
			continue
		}
		who, perms := clause[:i], clause[i+1:]
		if (who == "" || strings.ContainsAny(who, "oa")) && strings.ContainsRune(perms, 'w') && who != "" {
			worldWritable = true
		}
		if strings.ContainsRune(perms, 's') {
			setuid = true
		}
	}
	return worldWritable, setuid
}

func (s *scope) service(name string, args []string, ex string) {
	ops := operands(args)
	if len(ops) == 0 {
		return
	}
	verb := ops[0]
	switch name {
	case "service", "rc-service", "sv":
		if len(ops) > 1 {
			verb = ops[1]
		}
		if name == "sv" {
			verb = ops[0]
		}
	case "launchctl":
		if verb == "unload" || verb == "stop" || verb == "bootout" || verb == "remove" || verb == "kill" {
			s.a.add("service.launchctl", FamilyService, Medium, "stops a system service (launchctl "+verb+")", ex)
		}
		return
	}
	switch verb {
	case "reboot", "poweroff", "halt", "kexec", "suspend", "hibernate", "hybrid-sleep", "emergency", "rescue", "soft-reboot":
		s.a.add("power.systemctl", FamilyPower, High, "reboots, suspends or powers off the machine ("+name+" "+verb+")", ex)
	case "restart", "stop", "disable", "mask", "kill", "isolate", "daemon-reexec", "try-restart", "reload-or-restart", "force-reload", "force-stop", "down":
		s.a.add("service."+verb, FamilyService, Medium, "stops or restarts a system service ("+name+" "+verb+")", ex)
		if l := strings.ToLower(strings.Join(ops[1:], " ")); containsAny(l, "firewalld", "ufw", "nftables", "iptables", "apparmor", "auditd", "fail2ban", "selinux") {
			s.a.add("firewall.service", FamilyFirewall, High, "stops a firewall or a security service ("+name+" "+verb+" "+strings.Join(ops[1:], " ")+")", ex)
		}
	case "enable", "link", "reenable", "preset", "add-wants", "add-requires", "set-default", "edit", "revert":
		s.a.add("persistence.systemctl-"+verb, FamilyPersistence, Medium, "makes a service start by itself ("+name+" "+verb+")", ex)
	}
}

func (s *scope) kill(args []string, ex string) {
	signal := "TERM"
	var targets []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-l" || a == "-L" || a == "--list" || a == "--table":
			return
		case a == "--":
			targets = append(targets, args[i+1:]...)
			i = len(args)
		case (a == "-s" || a == "-n" || a == "--signal") && i+1 < len(args):
			signal = args[i+1]
			i++
		case len(a) > 1 && a[0] == '-' && len(targets) == 0 && signal == "TERM" && i+1 < len(args):
			signal = a[1:]
		default:
			targets = append(targets, a)
		}
	}
	signal = strings.TrimPrefix(strings.ToUpper(signal), "SIG")
	if len(targets) == 0 || signal == "0" {
		return
	}
	for _, t := range targets {
		if t == "1" || t == "-1" {
			s.a.add("kill.all", FamilyKill, Critical, "signals init or every process (kill "+t+")", ex)
			return
		}
	}
	if signal == "9" || signal == "KILL" {
		s.a.add("kill.force", FamilyKill, Medium, "force-kills processes (SIGKILL)", ex)
		return
	}
	s.a.add("kill.process", FamilyKill, Low, "stops processes", ex)
}

// findFilters are find predicates that narrow what is matched: with one of them, {} is some
// files under a starting point rather than everything there.
var findFilters = set("-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex",
	"-newer", "-mtime", "-mmin", "-atime", "-amin", "-ctime", "-cmin", "-size", "-empty", "-user", "-group",
	"-perm", "-links", "-inum", "-samefile", "-lname", "-ilname", "-nouser", "-nogroup", "-used")

// find: -delete and -exec are judged against the starting points.
func (s *scope) find(args []string, ex string) {
	var roots []string
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") || a == "(" || a == "!" {
			break
		}
		roots = append(roots, a)
	}
	if len(roots) == 0 {
		roots = []string{"."}
	}
	filtered := slices.ContainsFunc(args[i:], func(a string) bool { return findFilters[a] })
	for j := i; j+1 < len(args); j++ {
		if a := args[j]; a == "-name" || a == "-iname" || a == "-path" || a == "-ipath" || a == "-wholename" {
			pat := args[j+1]
			for _, c := range []string{"~/.ssh/" + pat, "~/.aws/" + pat, "~/.kube/" + pat, "~/" + pat, "/etc/" + pat, pat} {
				for _, m := range wordMatches(c) {
					if m.Family == FamilySecrets || m.Family == FamilyCredentials {
						s.a.add("credentials.find", FamilyCredentials, High, "searches the disk for secret files ("+pat+")", ex)
						goto searched
					}
				}
			}
		}
	}
searched:
	dangerousRoot := func(r string) (pathClass, bool) {
		c, _ := s.worst(r)
		return c, c == pathRoot || c == pathHome || c == pathSystemTop || c == pathSystemSub || c == pathUserHome
	}
	for ; i < len(args); i++ {
		switch args[i] {
		case "-delete":
			for _, r := range roots {
				if c, bad := dangerousRoot(r); bad && filtered {
					s.a.add("find.delete", FamilyDestructive, High, "find -delete of matching files under "+describe(r, c), ex)
				} else if bad {
					s.a.add("find.delete", FamilyDestructive, Critical, "find -delete under "+describe(r, c), ex)
				}
			}
		case "-fprint", "-fprint0", "-fprintf", "-fls":
			// find writes its list into a file: the same as a redirection.
			if i+1 < len(args) {
				s.writeTarget(args[i+1], "find writes its output into", ex)
				i++
			}
		case "-exec", "-execdir", "-ok", "-okdir":
			for _, r := range roots {
				for _, f := range s.resolve(r) {
					if secretDir.MatchString(strings.TrimRight(f, "/")) && !strings.HasSuffix(strings.TrimRight(f, "/"), "~") {
						s.a.add("credentials.find-exec", FamilyCredentials, High, "runs a command on every file in a directory of secrets ("+f+")", ex)
					}
				}
			}
			j := i + 1
			for j < len(args) && args[j] != ";" && args[j] != "+" {
				j++
			}
			cmd := args[i+1 : j]
			i = j
			if len(cmd) == 0 {
				continue
			}
			name := cmdName(finalOrSelf(cmd))
			for _, r := range roots {
				sub := []string{cmd[0]}
				if filtered {
					// {} is some matching file: judge the command's other arguments, and the
					// starting point for commands that destroy or open up what they are given.
					if c, bad := dangerousRoot(r); bad && (name == "rm" || name == "shred" || name == "mv" || name == "chmod" || name == "chown" || name == "chgrp") {
						s.a.add("find.exec", FamilyDestructive, High, "find -exec "+name+" on matching files under "+describe(r, c), ex)
					}
					// {} is a file under the root: judge the command with one in its place.
					for _, a := range cmd[1:] {
						sub = append(sub, strings.ReplaceAll(a, "{}", strings.TrimRight(r, "/")+"/{}"))
					}
					s.exec(sub, ex)
					continue
				}
				// {} stands for everything under the root, so the command acts recursively.
				switch name {
				case "rm":
					sub = append(sub, "-r")
				case "chmod", "chown", "chgrp":
					sub = append(sub, "-R")
				}
				for _, a := range cmd[1:] {
					sub = append(sub, strings.ReplaceAll(a, "{}", r))
				}
				s.exec(sub, ex)
			}
		}
	}
}

func finalOrSelf(argv []string) string {
	if f := finalCommand(argv); len(f) > 0 {
		return f[0]
	}
	return argv[0]
}

// exec analyses an argument list that another command runs (find -exec).
func (s *scope) exec(argv []string, ex string) {
	for range 16 {
		if len(argv) == 0 {
			return
		}
		st := unwrap(argv)
		if st.kind == "privilege" {
			s.a.add("privilege."+cmdName(argv[0]), FamilyPrivilege, High, "runs a command with elevated privileges", ex)
		}
		if st.script != "" {
			s.nestedArgs(st.script, st.params)
		}
		if st.kind == "" {
			s.command(argv, ex)
			return
		}
		argv = st.next
	}
}

// downloads remembers the files a downloader writes, and flags running one of them: curl -o
// i.sh URL && bash i.sh is curl | sh in two steps. A script the command line wrote itself
// (echo "…" > x.sh; bash x.sh) is analysed when it is run.
func (s *scope) downloads(argv []string, ex string) {
	name := cmdName(argv[0])
	if downloaders[name] {
		for i, a := range argv[1:] {
			if (a == "-o" || a == "-O" || a == "--output" || a == "--output-document") && i+2 < len(argv) && !(name == "curl" && a == "-O") {
				s.downloaded[cleanFile(argv[i+2])] = true
				s.writeTarget(argv[i+2], name+" downloads into", ex)
			}
			if v, ok := strings.CutPrefix(a, "--output="); ok {
				s.downloaded[cleanFile(v)] = true
				s.writeTarget(v, name+" downloads into", ex)
			}
			if !strings.HasPrefix(a, "-") && (name == "wget" || hasAny(argv, "-O", "--remote-name")) && (strings.Contains(a, "://") || strings.Contains(a, "/")) {
				s.downloaded[cleanFile(path.Base(a))] = true
			}
		}
		return
	}
	if len(s.downloaded) == 0 && len(s.written) == 0 && len(s.decoded) == 0 {
		return
	}
	// The file this command runs as a program, if any: ./f, or the script of sh f, python f…
	file := ""
	if strings.Contains(argv[0], "/") {
		file = cleanFile(argv[0])
	}
	if isInterpreter(name) {
		if ops := operands(argv[1:]); len(ops) > 0 {
			file = cleanFile(ops[0])
		}
	}
	if file == "" {
		return
	}
	if s.downloaded[file] {
		s.a.add("remote-exec.downloaded-file", FamilyRemoteExec, Critical, "runs a file it has just downloaded", ex)
	}
	if s.decoded[file] {
		s.a.add("encoded-exec.decoded-file", FamilyEncodedExec, Critical, "runs a file it has just decoded from hidden text", ex)
	}
	if text, ok := s.written[file]; ok {
		delete(s.written, file) // analyse it once
		if strings.HasPrefix(name, "python") || otherInterps[name] {
			s.interpreterCode(text, ex)
		} else {
			s.nested(text, scriptCommand)
		}
	}
}

func cleanFile(p string) string { return strings.TrimPrefix(path.Clean(p), "./") }
