//go:build !windows

package engine

import (
	"context"
	"fmt"
	"net"
	"runtime"
)

// dialPipe fails: named pipes exist only on Windows.
func dialPipe(ctx context.Context, path string) (net.Conn, error) {
	return nil, fmt.Errorf("named pipe %s: there are no named pipes on %s", path, runtime.GOOS)
}
