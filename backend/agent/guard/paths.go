package guard

import (
	"path"
	"regexp"
	"strings"
)

// writeTarget flags writes into devices and system paths, shell start-up and autostart files
// (persistence), and history and log files (wiping them).
func (s *scope) writeTarget(t, verb, ex string) {
	s.file(t, true, false)
	for _, f := range s.resolve(t) {
		if m := persistenceFile.FindString(f); m != "" {
			s.a.add("persistence.startup-file", FamilyPersistence, Medium, verb+" a file that runs at login or start-up ("+m+")", ex)
			break
		}
	}
	for _, f := range s.resolve(t) {
		if isLogFile(f) {
			s.a.add("log-wipe.overwrite", FamilyLogWipe, High, verb+" a history or log file ("+f+"), wiping it", ex)
			break
		}
	}
	switch {
	case t == "/dev/null" || t == "/dev/stdout" || t == "/dev/stderr" || t == "/dev/tty" || strings.HasPrefix(t, "/dev/fd/") || strings.HasPrefix(t, "/dev/tcp/") || strings.HasPrefix(t, "/dev/udp/"):
	case isDevice(t):
		s.a.add("disk.write-device", FamilyDisk, Critical, verb+" a raw disk or memory device ("+t+")", ex)
	case strings.HasPrefix(t, "/dev/"), strings.HasPrefix(t, "/proc/"), strings.HasPrefix(t, "/sys/"):
		s.a.add("write.kernel", FamilyDestructive, High, verb+" a kernel or device file ("+t+")", ex)
	default:
		switch c := classify(t); c {
		case pathRoot, pathSystemTop, pathSystemSub, pathSystemDeep:
			s.a.add("write.system", FamilyDestructive, High, verb+" "+describe(t, c), ex)
		}
	}
}

func isDevice(p string) bool {
	rest, ok := strings.CutPrefix(path.Clean(p), "/dev/")
	if !ok {
		return false
	}
	for _, pre := range []string{"sd", "hd", "vd", "xvd", "nvme", "mmcblk", "md", "dm-", "disk", "mapper/", "loop", "sr", "mem", "kmem", "port", "fb", "nbd"} {
		if strings.HasPrefix(rest, pre) {
			return true
		}
	}
	return false
}

// Path classes, from the harmless to the worst.
type pathClass int

const (
	pathRelative    pathClass = iota // build/tmp.txt
	pathOther                        // /tmp/x, /workspace/a, /home/u/project
	pathDynamic                      // "$X" — unknown until run time
	pathHomeTop                      // ~/Documents, ~/.config: a top-level folder of a home
	pathSystemDeep                   // /etc/nginx/conf.d/x, /usr/lib/x/y
	pathCwdAll                       // *, ., .., ./*
	pathDynamicRoot                  // $X/… — becomes / when X is empty
	pathUserHome                     // /home/user, /root/x
	pathSystemSub                    // /usr/lib, /etc/ssh, /var/log
	pathSystemTop                    // /etc, /usr, /home
	pathHome                         // ~, $HOME
	pathRoot                         // /, /*
)

var systemTop = set("bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "opt", "proc", "root", "sbin", "srv", "sys", "usr", "var", "home", "snap", "mnt", "media", "run", "nix", "System", "Library", "Applications", "Users", "private")

// disposableHome are top-level folders of a home that hold caches and scratch files only.
var disposableHome = set(".cache", "tmp", ".tmp", ".npm", ".pnpm-store", ".yarn-cache", ".node-gyp", "scratch")

// protectedDeep are top-level directories whose whole tree belongs to the system.
var protectedDeep = set("bin", "boot", "etc", "lib", "lib32", "lib64", "libx32", "sbin", "usr", "sys", "proc", "dev", "System", "Library")

// varState are the folders of /var that hold the system's state (package databases, mail,
// spools); /var/tmp and /var/cache are scratch.
var varState = set("lib", "spool", "mail", "db", "backups", "opt", "local")

func classify(p string) pathClass {
	if p == "" {
		return pathRelative
	}
	if strings.HasPrefix(p, dynamic) {
		if rest := strings.TrimPrefix(p, dynamic); strings.HasPrefix(rest, "/") {
			return pathDynamicRoot
		}
		return pathDynamic
	}
	if strings.HasPrefix(p, "~") {
		tail := strings.TrimPrefix(p, "~")
		if tail != "" && tail[0] != '/' {
			// ~user/…: another account's home; ~+ and ~- are the current and previous directory.
			user, sub, _ := strings.Cut(tail, "/")
			if user == "+" || user == "-" {
				return pathDynamic
			}
			if strings.Trim(sub, "/.*") == "" && !strings.Contains(sub, "..") {
				return pathUserHome
			}
			return classify(path.Clean("/home/" + user + "/" + sub))
		}
		if strings.Contains(tail, "..") {
			// ~/.. is the parent of the home directory: judge it as the path it is.
			return classify(path.Clean("/home/user" + tail))
		}
		if tail != "" && !strings.Contains(tail, dynamic) {
			tail = path.Clean(tail) // ~/./ and ~//x are ~/ and ~/x
		}
		rest := strings.TrimLeft(tail, "/")
		if rest == "" || rest == "*" || rest == "." || rest == ".*" || (!strings.HasPrefix(p, "~/") && !strings.Contains(p, "/")) {
			return pathHome
		}
		if top := strings.TrimRight(rest, "/"); !strings.Contains(top, "/") && !disposableHome[top] && !strings.Contains(top, dynamic) {
			return pathHomeTop
		}
		return pathOther
	}
	if !strings.HasPrefix(p, "/") {
		clean := path.Clean(p)
		if clean == "." || clean == ".." || clean == "*" || clean == ".*" || strings.Trim(clean, "./*") == "" {
			return pathCwdAll
		}
		if strings.Contains(p, dynamic) {
			return pathDynamic
		}
		return pathRelative
	}
	parts := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
	// A wildcard stands for the whole directory it is in.
	for i, part := range parts {
		if strings.ContainsAny(part, "*?[") || strings.Contains(part, dynamic) {
			parts = parts[:i]
			break
		}
	}
	if len(parts) == 0 || (len(parts) == 1 && parts[0] == "") {
		return pathRoot
	}
	top := parts[0]
	if !systemTop[top] {
		return pathOther
	}
	switch {
	case len(parts) == 1:
		return pathSystemTop
	case (top == "home" || top == "Users") && len(parts) == 2, top == "root" && len(parts) == 2:
		return pathUserHome
	case (top == "home" || top == "Users") && len(parts) == 3 && !disposableHome[parts[2]]:
		return pathHomeTop
	case top == "home" || top == "Users" || top == "root":
		return pathOther
	case top == "usr" && parts[1] == "local" && len(parts) > 2:
		return pathOther
	case len(parts) == 2:
		if top == "tmp" || top == "mnt" || top == "media" || top == "opt" || top == "srv" || top == "snap" {
			return pathOther
		}
		return pathSystemSub
	case protectedDeep[top], top == "var" && varState[parts[1]] && !(len(parts) > 3 && parts[1] == "lib" && parts[2] == "apt" && parts[3] == "lists"):
		return pathSystemDeep
	}
	return pathOther
}

func describe(p string, c pathClass) string {
	p = strings.ReplaceAll(p, dynamic, "$?")
	switch c {
	case pathRoot:
		return "the root directory (" + p + ")"
	case pathHome:
		return "the home directory (" + p + ")"
	case pathUserHome:
		return "a user's home directory (" + p + ")"
	case pathSystemTop, pathSystemSub, pathSystemDeep:
		return "the system path " + p
	case pathCwdAll:
		return "everything in the current directory (" + p + ")"
	case pathDynamicRoot:
		return p + ", which is / when the variable is empty"
	case pathHomeTop:
		return "a top-level folder of a home directory (" + p + ")"
	case pathDynamic:
		return "paths only known at run time"
	}
	return p
}

// persistenceFile matches files whose contents run by themselves: shell start-up files,
// desktop autostart entries, X session scripts, rc.local, profile.d, ld.so.preload, git hooks
// and the SSH client's command hooks.
var persistenceFile = regexp.MustCompile(`(?:^|/)(?:\.bashrc|\.bash_aliases|\.bash_profile|\.bash_login|\.bash_logout|\.profile|\.zshrc|\.zprofile|\.zshenv|\.zlogin|\.zlogout|\.cshrc|\.tcshrc|\.login|\.kshrc|\.mkshrc|\.xinitrc|\.xsession|\.xsessionrc|\.xprofile|\.Xresources|\.pam_environment|\.inputrc)$|\.config/fish/(?:config\.fish|conf\.d)|\.config/autostart(?:/|$)|/etc/xdg/autostart|\.config/autostart-scripts|\.config/plasma-workspace/env|\.config/openbox/autostart|\.config/lxsession/|/etc/profile(?:\.d)?(?:/|$)|/etc/bash\.bashrc|/etc/bashrc|/etc/zsh/|/etc/environment|/etc/rc\.local|/etc/init\.d/|/etc/ld\.so\.preload|/etc/update-motd\.d/|\.git/hooks/|\.ssh/(?:rc|config)$|/etc/ssh/sshrc|\.config/systemd/user/|\.local/share/systemd/user/`)

// logFile matches shell histories and system logs.
var logFile = regexp.MustCompile(`\.(?:bash|zsh|sh|python|mysql|psql|node_repl)_history$|\.histfile$|\.lesshst$|\.viminfo$|^/var/log(?:/|$)|/(?:wtmp|btmp|utmp|lastlog|faillog)$|/var/log/(?:journal|audit)`)

func isLogFile(p string) bool {
	return p != "/var/log" && logFile.MatchString(p) || p == "/var/log"
}

// worst classifies a path in every form the script may mean (as written and resolved against
// the directory it changed to) and returns the worst class.
func (s *scope) worst(t string) (pathClass, string) {
	c, shown := classify(t), t
	for _, r := range s.resolve(t) {
		if rc := classify(r); rc > c {
			c, shown = rc, r
		}
	}
	return c, shown
}
