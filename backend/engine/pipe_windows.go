package engine

import (
	"context"
	"net"

	"github.com/Microsoft/go-winio"
)

// dialPipe connects to a Windows named pipe (\\.\pipe\docker_engine).
func dialPipe(ctx context.Context, path string) (net.Conn, error) {
	return winio.DialPipeContext(ctx, path)
}
