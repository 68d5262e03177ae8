package guard

import (
	"slices"
	"strings"
)

// hostControl flags commands that cut the machine off or pull its file systems away: network
// links and routes taken down, file systems unmounted or remounted read-only, swap turned off.
// In the agent's desktop they end the session as surely as a reboot.
func (s *scope) hostControl(name string, args []string, ex string) {
	switch name {
	case "ip":
		ops := operands(args)
		if len(ops) < 2 {
			return
		}
		obj, verb := ops[0], ops[1]
		switch {
		case strings.HasPrefix("link", obj) && len(obj) >= 1 && verb == "set" && slices.Contains(ops[2:], "down"),
			strings.HasPrefix("link", obj) && len(obj) >= 1 && (verb == "delete" || verb == "del"):
			s.a.add("network.link-down", FamilyService, High, "takes a network interface down (ip link)", ex)
		case (strings.HasPrefix("route", obj) || strings.HasPrefix("address", obj) || obj == "addr") && len(obj) >= 1 && verb == "flush",
			strings.HasPrefix("route", obj) && len(obj) >= 1 && (verb == "del" || verb == "delete") && slices.Contains(ops[2:], "default"):
			s.a.add("network.flush", FamilyService, High, "removes the machine's routes or addresses (ip "+obj+" "+verb+")", ex)
		}
	case "ifconfig":
		if slices.Contains(args, "down") {
			s.a.add("network.link-down", FamilyService, High, "takes a network interface down (ifconfig)", ex)
		}
	case "ifdown":
		s.a.add("network.link-down", FamilyService, High, "takes a network interface down (ifdown)", ex)
	case "nmcli":
		ops := operands(args)
		switch {
		case len(ops) >= 2 && strings.HasPrefix("networking", ops[0]) && len(ops[0]) >= 1 && ops[1] == "off",
			len(ops) >= 3 && strings.HasPrefix("radio", ops[0]) && len(ops[0]) >= 1 && ops[len(ops)-1] == "off",
			len(ops) >= 2 && strings.HasPrefix("device", ops[0]) && len(ops[0]) >= 1 && (ops[1] == "disconnect" || ops[1] == "down" || ops[1] == "delete"),
			len(ops) >= 2 && strings.HasPrefix("connection", ops[0]) && len(ops[0]) >= 1 && (ops[1] == "down" || ops[1] == "delete"):
			s.a.add("network.nmcli-off", FamilyService, High, "turns networking off (nmcli)", ex)
		}
	case "rfkill":
		if slices.Contains(args, "block") {
			s.a.add("network.rfkill", FamilyService, Medium, "blocks wireless devices (rfkill)", ex)
		}
	case "umount", "fusermount", "fusermount3":
		if name != "umount" && !hasShortFlag(args, 'u') {
			return
		}
		for _, t := range operands(args) {
			if c, t := s.worst(t); c == pathRoot || c == pathSystemTop || c == pathSystemSub || c == pathHome || c == pathUserHome {
				s.a.add("disk.umount", FamilyDisk, High, "unmounts "+describe(t, c), ex)
				return
			}
		}
		if hasAny(args, "-a", "--all", "-A", "--all-targets") {
			s.a.add("disk.umount", FamilyDisk, High, "unmounts every file system (umount -a)", ex)
		}
	case "mount":
		for i, a := range args {
			o := ""
			if (a == "-o" || a == "--options") && i+1 < len(args) {
				o = args[i+1]
			} else if v, ok := strings.CutPrefix(a, "-o"); ok && v != "" {
				o = v
			}
			if slices.Contains(strings.Split(o, ","), "remount") {
				s.a.add("disk.remount", FamilyDisk, High, "remounts a mounted file system with other options", ex)
				return
			}
		}
		for _, a := range args {
			if a == "--bind" || a == "-B" || a == "--rbind" || a == "-R" || a == "--move" || a == "-M" {
				for _, t := range operands(args) {
					if c, t := s.worst(t); c >= pathSystemSub {
						s.a.add("disk.mount-over", FamilyDisk, High, "mounts over "+describe(t, c), ex)
						return
					}
				}
			}
		}
	case "swapoff":
		s.a.add("disk.swapoff", FamilyDisk, Medium, "turns swap off", ex)
	}
}
