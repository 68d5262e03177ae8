package hostdesk

import (
	"io"
	"log"
	"sync"

	"github.com/jezek/xgb"
)

var quietOnce sync.Once

// quietX11 silences xgb's package logger, which writes two lines to stderr for every X
// connection made without an ~/.Xauthority file — and kbinani/screenshot connects once per
// capture. xgb offers no per-connection logger, so this is process-wide (the in-guest driver
// does the same in its main).
func quietX11() {
	quietOnce.Do(func() { xgb.Logger = log.New(io.Discard, "", 0) })
}
