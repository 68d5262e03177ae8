package images

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"

	"cubicle/backend/fault"
)

// Architectures the recipes build for, in GOARCH terms. The standard image exists for both;
// the cursor image only for amd64 (its base is published for linux/amd64 alone).
var archs = []string{"amd64", "arm64"}

// elfMachine is the ELF machine of each supported architecture.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// debianArch names a GOARCH in Debian's terms (debootstrap --arch).
var debianArch = map[string]string{"amd64": "amd64", "arm64": "arm64"}

// supportedArch reports whether arch is one the recipes build for.
func supportedArch(arch string) error {
	if _, ok := elfMachine[arch]; ok {
		return nil
	}
	return fault.Unavailable("the container engine runs on %q; Cubicle's desktop images exist for linux/%s",
		arch, strings.Join(archs, " and linux/"))
}

// driverArch reads the architecture of a driver binary from its ELF header and checks that
// it is a static Linux executable (it must run in any base image, with no loader or libc).
func driverArch(bin []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return "", fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("ELF type %s, want an executable", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", errors.New("dynamically linked; build it with CGO_ENABLED=0")
		}
	}
	for arch, m := range elfMachine {
		if f.Machine == m {
			return arch, nil
		}
	}
	return "", fmt.Errorf("ELF machine %s is not one of linux/%s", f.Machine, strings.Join(archs, ", linux/"))
}

// embeddedDriver is the name of the driver for arch in images/bin (scripts/build.sh).
func embeddedDriver(arch string) string { return driverName + "-" + arch }

// loadDrivers returns the driver binaries by architecture: the explicit ones (Config.Drivers,
// Config.Driver, Config.DriverPath, each checked against its ELF header) or, when none is
// given, the ones embedded from images/bin. Having none at all is fault.ErrUnavailable.
func loadDrivers(cfg Config) (map[string][]byte, error) {
	out := map[string][]byte{}
	add := func(what string, bin []byte, want string) error {
		arch, err := driverArch(bin)
		if err != nil {
			return fault.Invalid("images: the driver %s is not usable: %v", what, err)
		}
		if want != "" && arch != want {
			return fault.Invalid("images: the driver %s is built for linux/%s, not linux/%s", what, arch, want)
		}
		out[arch] = bin
		return nil
	}
	for _, arch := range sortedKeys(cfg.Drivers) {
		if err := add("for "+arch, cfg.Drivers[arch], arch); err != nil {
			return nil, err
		}
	}
	if len(cfg.Driver) > 0 {
		if err := add("given in Config.Driver", cfg.Driver, ""); err != nil {
			return nil, err
		}
	}
	if cfg.DriverPath != "" {
		d, err := os.ReadFile(cfg.DriverPath)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fault.Unavailable("driver not found at %s: build it with scripts/build.sh", cfg.DriverPath)
		case err != nil:
			return nil, fault.Unavailable("read driver %s: %v", cfg.DriverPath, err)
		case len(d) == 0:
			return nil, fault.Unavailable("driver %s is empty: build it with scripts/build.sh", cfg.DriverPath)
		}
		if err := add(cfg.DriverPath, d, ""); err != nil {
			return nil, err
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	for _, arch := range archs {
		d, err := bin.ReadFile("bin/" + embeddedDriver(arch))
		if err != nil || len(d) == 0 {
			continue
		}
		if err := add("embedded as images/bin/"+embeddedDriver(arch), d, arch); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, fault.Unavailable("driver not built: run scripts/build.sh (images/bin/%s-<arch> is missing from this binary)", driverName)
	}
	return out, nil
}

// driverFor returns the driver for arch, or says how to build it.
func (b *Builder) driverFor(arch string) ([]byte, error) {
	if d, ok := b.drivers[arch]; ok {
		return d, nil
	}
	have := sortedKeys(b.drivers)
	return nil, fault.Unavailable("no cubicle-guest driver for linux/%s in this build of Cubicle (it has linux/%s): "+
		"build it with scripts/build.sh (CGO_ENABLED=0 GOOS=linux GOARCH=%s go build -o images/bin/%s ./images/guest)",
		arch, strings.Join(have, ", linux/"), arch, embeddedDriver(arch))
}

// platformFor is the build or pull platform for an image of arch on an engine of engineArch:
// "" (the engine's own) when they agree, else linux/<arch> (the engine emulates it).
func platformFor(arch, engineArch string) string {
	if arch == engineArch {
		return ""
	}
	return "linux/" + arch
}

// hostEmulates reports whether this host can run linux/arch binaries of a foreign
// architecture through a binfmt_misc handler (qemu-user, box64, Rosetta). Where binfmt_misc
// cannot be read (not Linux, not mounted, or the engine runs in a VM as with Podman/Docker
// Desktop) it cannot tell and answers true: the engine then reports the failure itself.
func hostEmulates(arch string) bool {
	const dir = "/proc/sys/fs/binfmt_misc"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true
	}
	if _, err := os.Stat(dir + "/status"); err != nil {
		return true // not mounted: unknown
	}
	return binfmtHandles(os.DirFS(dir), entries, arch)
}

// binfmtHandles reports whether one of the enabled binfmt_misc entries matches the ELF header
// of a 64-bit little-endian executable for arch: its magic, under its mask, equals that
// header's first 20 bytes.
func binfmtHandles(fsys fs.FS, entries []fs.DirEntry, arch string) bool {
	m, ok := elfMachine[arch]
	if !ok {
		return false
	}
	// e_ident (64-bit, little endian, version 1), e_type ET_EXEC, e_machine.
	header := []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, byte(m), byte(m >> 8)}
	for _, e := range entries {
		if e.Name() == "status" || e.Name() == "register" {
			continue
		}
		data, err := fs.ReadFile(fsys, e.Name())
		if err != nil || !strings.HasPrefix(string(data), "enabled") {
			continue
		}
		var magic, mask []byte
		offset := 0
		for _, line := range strings.Split(string(data), "\n") {
			k, v, _ := strings.Cut(line, " ")
			switch k {
			case "offset":
				offset, _ = strconv.Atoi(v)
			case "magic":
				magic, _ = hex.DecodeString(v)
			case "mask":
				mask, _ = hex.DecodeString(v)
			}
		}
		if offset != 0 || len(magic) == 0 || len(magic) > len(header) {
			continue
		}
		match := true
		for i := range magic {
			mk := byte(0xff)
			if i < len(mask) {
				mk = mask[i]
			}
			if header[i]&mk != magic[i]&mk {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
