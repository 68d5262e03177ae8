package images

import (
	"bytes"
	"context"
	"debug/elf"
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"cubicle/backend/guest/guesttest"
)

// TestRealDriverArchitectures cross-builds the real driver for every supported architecture the
// way scripts/build.sh does and checks what the Builder relies on: a static executable for the
// right machine, recognised from its ELF header, and put into the driver layer of an image for
// an engine of that architecture (the cursor image always gets amd64).
func TestRealDriverArchitectures(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-builds the driver; run without -short")
	}
	bins := map[string][]byte{}
	for _, arch := range archs {
		data, err := os.ReadFile(guesttest.BinaryFor(t, arch))
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if f.Machine != elfMachine[arch] || f.Class != elf.ELFCLASS64 {
			t.Fatalf("driver for %s: machine %s, class %s", arch, f.Machine, f.Class)
		}
		f.Close()
		got, err := driverArch(data)
		if err != nil || got != arch {
			t.Fatalf("driverArch(%s driver) = %q, %v", arch, got, err)
		}
		bins[arch] = data
		t.Logf("linux/%s driver: %d bytes", arch, len(data))
	}
	for _, arch := range archs {
		t.Run(arch+" engine", func(t *testing.T) {
			fe := &fakeEngine{arch: arch}
			b, err := New(Config{Engine: fe, Drivers: bins, LockPath: t.TempDir() + "/lock", Pins: staticPins(DefaultPins()),
				Emulates: func(string) bool { return true }})
			if err != nil {
				t.Fatal(err)
			}
			b.host = testHost(arch)
			fe.put(b.offlineBaseRef(arch), fakeImage("base"))
			res, err := b.Ensure(context.Background(), Standard, nil)
			if err != nil || res.Arch != arch {
				t.Fatalf("Ensure(standard) = %+v, %v", res, err)
			}
			if len(fe.driverCtx) != 1 || !bytes.Equal(fe.driverCtx[0], bins[arch]) {
				t.Fatalf("the standard image for linux/%s did not get the linux/%s driver", arch, arch)
			}
			res, err = b.Ensure(context.Background(), Cursor, nil)
			if err != nil || res.Arch != "amd64" {
				t.Fatalf("Ensure(cursor) = %+v, %v", res, err)
			}
			if len(fe.driverCtx) != 2 || !bytes.Equal(fe.driverCtx[1], bins["amd64"]) {
				t.Fatal("the cursor image did not get the linux/amd64 driver")
			}
		})
	}
}

func TestBinfmtHandles(t *testing.T) {
	// The entries as Debian's qemu-user-static and binfmt-support register them.
	aarch64 := "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POF\noffset 0\n" +
		"magic 7f454c460201010000000000000000000200b700\nmask ffffffffffffff00fffffffffffffffffeffffff\n"
	x8664 := "enabled\ninterpreter /usr/bin/qemu-x86_64-static\nflags: F\noffset 0\n" +
		"magic 7f454c4602010100000000000000000002003e00\nmask fffffffffffefe00fffffffffffffffffeffffff\n"
	python := "enabled\ninterpreter /usr/bin/python3.11\nflags: \noffset 0\nmagic a70d0d0a\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		arch  string
		want  bool
	}{
		{"aarch64 handler", map[string]string{"qemu-aarch64": aarch64}, "arm64", true},
		{"aarch64 handler is not x86-64", map[string]string{"qemu-aarch64": aarch64}, "amd64", false},
		{"x86-64 handler", map[string]string{"qemu-x86_64": x8664, "python3.11": python}, "amd64", true},
		{"disabled", map[string]string{"qemu-aarch64": strings.Replace(aarch64, "enabled", "disabled", 1)}, "arm64", false},
		{"none", map[string]string{"python3.11": python}, "arm64", false},
		{"unknown arch", map[string]string{"qemu-aarch64": aarch64}, "riscv64", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{"status": {Data: []byte("enabled\n")}, "register": {}}
			for n, d := range tc.files {
				fsys[n] = &fstest.MapFile{Data: []byte(d)}
			}
			entries, err := fs.ReadDir(fsys, ".")
			if err != nil {
				t.Fatal(err)
			}
			if got := binfmtHandles(fsys, entries, tc.arch); got != tc.want {
				t.Fatalf("binfmtHandles(%s) = %v, want %v", tc.arch, got, tc.want)
			}
		})
	}
}
