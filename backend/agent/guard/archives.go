package guard

import (
	"strings"
)

// Archives extracted over system roots: tar -C / -x, unzip -d /etc, cpio -i in /, 7z x -o/,
// dpkg -x pkg.deb /, and an archive unpacked in the directory the command changed to
// (cd / && tar xf x.tar). Every file of the archive replaces the one at its path, so the
// destination is judged like the target of a recursive write.

// extract finds the destination of an archive tool that extracts, if any, and judges it.
func (s *scope) extract(name string, args []string, ex string) {
	dest, extracting, absolute := "", false, false
	switch name {
	case "tar", "bsdtar", "gtar":
		for i, a := range args {
			switch {
			case a == "--extract" || a == "--get":
				extracting = true
			case a == "-P" || a == "--absolute-names":
				absolute = true
			case (a == "-C" || a == "--directory" || a == "--cd") && i+1 < len(args):
				dest = args[i+1]
			case strings.HasPrefix(a, "--directory="):
				dest = strings.TrimPrefix(a, "--directory=")
			case strings.HasPrefix(a, "--one-top-level=/") || strings.HasPrefix(a, "--one-top-level=~"):
				dest = strings.TrimPrefix(a, "--one-top-level=")
			case strings.HasPrefix(a, "-C") && len(a) > 2:
				dest = a[2:]
			case strings.HasPrefix(a, "--"):
			case strings.HasPrefix(a, "-") || i == 0:
				// -xzf, or the old style's first word (xzf)
				cluster := strings.TrimPrefix(a, "-")
				if strings.Trim(cluster, "xzjJfvpPkoOmaSWUBGgnhlrtuAcdw") == "" {
					extracting = extracting || strings.ContainsRune(cluster, 'x')
					absolute = absolute || strings.ContainsRune(cluster, 'P')
				}
			}
		}
	case "unzip":
		extracting = !hasAny(args, "-l", "-t", "-v", "-Z", "-p", "-c", "-z")
		for i, a := range args {
			if a == "-d" && i+1 < len(args) {
				dest = args[i+1]
			} else if strings.HasPrefix(a, "-d") && len(a) > 2 {
				dest = a[2:]
			}
		}
	case "cpio":
		for i, a := range args {
			switch {
			case a == "--extract":
				extracting = true
			case (a == "-D" || a == "--directory") && i+1 < len(args):
				dest = args[i+1]
			case strings.HasPrefix(a, "--directory="):
				dest = strings.TrimPrefix(a, "--directory=")
			case len(a) > 1 && a[0] == '-' && a[1] != '-':
				extracting = extracting || strings.ContainsRune(a, 'i')
			}
		}
	case "7z", "7za", "7zr", "7zz":
		ops := operands(args)
		extracting = len(ops) > 0 && (ops[0] == "x" || ops[0] == "e")
		for _, a := range args {
			if strings.HasPrefix(a, "-o") && len(a) > 2 {
				dest = a[2:]
			}
		}
	case "dpkg", "dpkg-deb":
		for i, a := range args {
			if (a == "-x" || a == "--extract" || a == "-X" || a == "--vextract" || a == "-R" || a == "--raw-extract") && i+2 < len(args) {
				extracting, dest = true, args[i+2]
			}
		}
		if !extracting {
			return
		}
	case "pax":
		extracting = hasAny(args, "-r", "-rw") || hasShortFlag(args, 'r')
		if ops := operands(args); hasShortFlag(args, 'w') && hasShortFlag(args, 'r') && len(ops) > 0 {
			dest = ops[len(ops)-1]
		}
	case "ar":
		return
	default:
		return
	}
	if !extracting {
		return
	}
	if absolute {
		s.a.add("archive.absolute-names", FamilyDestructive, Medium, name+" extracts members at the absolute paths they name (anywhere on the disk)", ex)
	}
	if dest == "" {
		if !s.moved || s.cwd == "" {
			return
		}
		dest = s.cwd
	}
	s.extractInto(dest, name, ex)
}

// extractInto judges a directory an archive is unpacked into.
func (s *scope) extractInto(dir, tool, ex string) {
	s.file(dir, true, true)
	c, shown := s.worst(dir)
	switch c {
	case pathRoot, pathHome, pathSystemTop, pathSystemSub, pathSystemDeep, pathUserHome, pathDynamicRoot:
		s.a.add("archive.extract-system", FamilyDestructive, High, tool+" extracts an archive over "+describe(shown, c)+", replacing the files there", ex)
		return
	}
	for _, f := range s.resolve(dir) {
		f = strings.TrimRight(f, "/")
		if secretDir.MatchString(f) || persistenceFile.MatchString(f) || persistenceFile.MatchString(f+"/") {
			s.a.add("archive.extract-sensitive", FamilyPersistence, Medium, tool+" extracts an archive into "+f+" (keys or start-up files)", ex)
			return
		}
	}
}
