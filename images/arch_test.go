package images

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"testing"

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
				EmulatesAMD64: func() bool { return true }})
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
