package bench

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestSlowLink: the emulated link carries no more than its rate and adds its delay each way
// (lower bounds only: a loaded machine can only make it slower), and passes every byte intact.
func TestSlowLink(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // an echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	const rate = 8e6 // 1 MB/s
	link, err := newSlowLink(ln.Addr().String(), rate, 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer link.close()
	c, err := net.Dial("tcp", link.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	start := time.Now()
	c.Write([]byte{7})
	one := make([]byte, 1)
	if _, err := io.ReadFull(c, one); err != nil || one[0] != 7 {
		t.Fatalf("echo: %v %v", one, err)
	}
	if rtt := time.Since(start); rtt < 60*time.Millisecond {
		t.Errorf("a round trip through the link took %v, less than its 2 × 30 ms of delay", rtt)
	}

	data := make([]byte, 600<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	start = time.Now()
	go c.Write(data)
	got := make([]byte, len(data))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	for i := range got {
		if got[i] != data[i] {
			t.Fatalf("byte %d changed on the way", i)
		}
	}
	// 600 KiB through 1 MB/s twice (there and back, pipelined): at least ~0.6 s.
	if el < 550*time.Millisecond {
		t.Errorf("600 KiB went through a 1 MB/s link and back in %v", el)
	}
	t.Logf("600 KiB echoed in %v", el)
}
