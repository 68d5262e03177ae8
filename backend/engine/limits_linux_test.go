package engine

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

func TestReadHostLimitsPeer(t *testing.T) {
	// A listener in this process: the peer is ourselves, so the result equals our own limits.
	sock := filepath.Join(t.TempDir(), "s.sock")
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	own := ReadHostLimits("")
	if own.NoFile == 0 || own.NProc == 0 {
		t.Fatalf("own limits unknown: %+v", own)
	}
	if got := ReadHostLimits(sock); got != own {
		t.Fatalf("ReadHostLimits(own socket) = %+v, want %+v", got, own)
	}
	pid, err := peerPID(sock)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("peerPID = %d, %v; want %d", pid, err, os.Getpid())
	}
	if got := ReadHostLimits(filepath.Join(t.TempDir(), "none.sock")); got != own {
		t.Fatalf("ReadHostLimits(missing socket) = %+v, want own %+v", got, own)
	}
}
