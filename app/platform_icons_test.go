package app

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// The Windows and macOS icons in build/ are the icon icon.go draws, rendered at each size
// (sharper than scaling build/appicon.png down). Refresh them with
// `go test ./app -run TestPlatformIcons -update`.

// icoSizes are the images of build/windows/icon.ico, each stored as PNG (Windows Vista+).
var icoSizes = []int{16, 24, 32, 48, 64, 128, 256}

// icnsEntries are the images of build/darwin/iconfile.icns by OSType: PNG data, as macOS
// 10.7+ reads them (ic11–ic14 are the @2x Retina variants).
var icnsEntries = []struct {
	typ  string
	size int
}{
	{"icp4", 16}, {"icp5", 32}, {"icp6", 64}, {"ic07", 128}, {"ic08", 256}, {"ic09", 512},
	{"ic10", 1024}, {"ic11", 32}, {"ic12", 64}, {"ic13", 256}, {"ic14", 512},
}

func TestPlatformIcons(t *testing.T) {
	icoPath := filepath.Join("..", "build", "windows", "icon.ico")
	icnsPath := filepath.Join("..", "build", "darwin", "iconfile.icns")
	if *update {
		var pngs [][]byte
		for _, s := range icoSizes {
			pngs = append(pngs, iconPNG(s))
		}
		writeFile(t, icoPath, encodeICO(icoSizes, pngs))
		var entries []icnsEntry
		for _, e := range icnsEntries {
			entries = append(entries, icnsEntry{e.typ, iconPNG(e.size)})
		}
		writeFile(t, icnsPath, encodeICNS(entries))
	}

	ico, err := os.ReadFile(icoPath)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	images, err := decodeICO(ico)
	if err != nil {
		t.Fatalf("%s: %v", icoPath, err)
	}
	if len(images) != len(icoSizes) {
		t.Fatalf("%s holds %d images, want %d", icoPath, len(images), len(icoSizes))
	}
	for i, s := range icoSizes {
		checkIcon(t, fmt.Sprintf("%s #%d", icoPath, i), images[i], s)
	}

	icns, err := os.ReadFile(icnsPath)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	entries, err := decodeICNS(icns)
	if err != nil {
		t.Fatalf("%s: %v", icnsPath, err)
	}
	if len(entries) != len(icnsEntries) {
		t.Fatalf("%s holds %d images, want %d", icnsPath, len(entries), len(icnsEntries))
	}
	for i, e := range icnsEntries {
		if entries[i].typ != e.typ {
			t.Errorf("%s entry %d is %q, want %q", icnsPath, i, entries[i].typ, e.typ)
			continue
		}
		img, err := png.Decode(bytes.NewReader(entries[i].data))
		if err != nil {
			t.Errorf("%s %s: %v", icnsPath, e.typ, err)
			continue
		}
		checkIcon(t, icnsPath+" "+e.typ, img, e.size)
	}
}

// checkIcon compares img with the icon drawn at size, allowing rounding differences.
func checkIcon(t *testing.T, name string, img image.Image, size int) {
	t.Helper()
	want := renderIcon(size)
	if img.Bounds() != want.Bounds() {
		t.Errorf("%s is %v, want %dx%d", name, img.Bounds(), size, size)
		return
	}
	bad := 0
	for y := 0; y < size; y++ {
		for x := 0; x < size; x++ {
			r1, g1, b1, a1 := img.At(x, y).RGBA()
			r2, g2, b2, a2 := want.At(x, y).RGBA()
			if max(diff8(r1, r2), diff8(g1, g2), diff8(b1, b2), diff8(a1, a2)) > 2 {
				bad++
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d pixels differ from the drawn icon; run with -update after changing icon.go", name, bad)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// encodeICO writes an ICO file of PNG images: ICONDIR, one ICONDIRENTRY each (a side of 256
// is written as 0), then the images.
func encodeICO(sizes []int, pngs [][]byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, [3]uint16{0, 1, uint16(len(pngs))})
	offset := 6 + 16*len(pngs)
	for i, p := range pngs {
		side := byte(sizes[i])
		if sizes[i] >= 256 {
			side = 0
		}
		b.Write([]byte{side, side, 0, 0})
		binary.Write(&b, binary.LittleEndian, [2]uint16{1, 32}) // planes, bits per pixel
		binary.Write(&b, binary.LittleEndian, [2]uint32{uint32(len(p)), uint32(offset)})
		offset += len(p)
	}
	for _, p := range pngs {
		b.Write(p)
	}
	return b.Bytes()
}

// decodeICO reads the images of an ICO file (PNG or BMP entries; only PNG is decoded).
func decodeICO(data []byte) ([]image.Image, error) {
	if len(data) < 6 || binary.LittleEndian.Uint16(data[0:]) != 0 || binary.LittleEndian.Uint16(data[2:]) != 1 {
		return nil, fmt.Errorf("not an icon file")
	}
	n := int(binary.LittleEndian.Uint16(data[4:]))
	var out []image.Image
	for i := 0; i < n; i++ {
		e := data[6+16*i:]
		if len(e) < 16 {
			return nil, fmt.Errorf("entry %d truncated", i)
		}
		size, off := binary.LittleEndian.Uint32(e[8:]), binary.LittleEndian.Uint32(e[12:])
		if uint64(off)+uint64(size) > uint64(len(data)) {
			return nil, fmt.Errorf("entry %d points past the end", i)
		}
		img, err := png.Decode(bytes.NewReader(data[off : off+size]))
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		side := int(e[0])
		if side == 0 {
			side = 256
		}
		if img.Bounds().Dx() != side || img.Bounds().Dy() != side {
			return nil, fmt.Errorf("entry %d says %d px, holds %v", i, side, img.Bounds())
		}
		out = append(out, img)
	}
	return out, nil
}

type icnsEntry struct {
	typ  string
	data []byte
}

// encodeICNS writes an Apple icon image: "icns", the file length, then each entry as its
// OSType, its length (header included) and its data; all big-endian.
func encodeICNS(entries []icnsEntry) []byte {
	var body bytes.Buffer
	for _, e := range entries {
		body.WriteString(e.typ)
		binary.Write(&body, binary.BigEndian, uint32(8+len(e.data)))
		body.Write(e.data)
	}
	var b bytes.Buffer
	b.WriteString("icns")
	binary.Write(&b, binary.BigEndian, uint32(8+body.Len()))
	b.Write(body.Bytes())
	return b.Bytes()
}

func decodeICNS(data []byte) ([]icnsEntry, error) {
	if len(data) < 8 || string(data[:4]) != "icns" || int(binary.BigEndian.Uint32(data[4:])) != len(data) {
		return nil, fmt.Errorf("not an icns file, or its length is wrong")
	}
	var out []icnsEntry
	for p := 8; p < len(data); {
		if p+8 > len(data) {
			return nil, fmt.Errorf("entry at %d truncated", p)
		}
		n := int(binary.BigEndian.Uint32(data[p+4:]))
		if n < 8 || p+n > len(data) {
			return nil, fmt.Errorf("entry at %d has length %d", p, n)
		}
		out = append(out, icnsEntry{string(data[p : p+4]), data[p+8 : p+n]})
		p += n
	}
	return out, nil
}
