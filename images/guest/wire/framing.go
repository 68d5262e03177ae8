package wire

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
)

// ErrTooLarge is returned by WriteMessage and ReadMessage for a message over the limits; after
// a read, the stream is out of sync and must be closed.
var ErrTooLarge = errors.New("guest: message exceeds protocol limits")

// WriteMessage writes one message: two big-endian uint32 lengths (JSON, blob), the JSON
// envelope and the blob, in a single write on a net.Conn. Concurrent writers must serialise
// their calls.
func WriteMessage(w io.Writer, env *Envelope, blob []byte) error {
	js, err := json.Marshal(env)
	if err != nil {
		return err
	}
	if len(js) > MaxHeader || len(blob) > MaxBlob+MaxHeader {
		return fmt.Errorf("%w (%d bytes of JSON, %d of data)", ErrTooLarge, len(js), len(blob))
	}
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[0:], uint32(len(js)))
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(blob)))
	if c, ok := w.(net.Conn); ok {
		bufs := net.Buffers{hdr[:], js}
		if len(blob) > 0 {
			bufs = append(bufs, blob)
		}
		_, err = bufs.WriteTo(c)
		return err
	}
	// Never an empty Write: on a synchronous stream (net.Pipe) it waits for a reader.
	buf := append(append(hdr[:0:0], hdr[:]...), js...)
	if _, err := w.Write(buf); err != nil || len(blob) == 0 {
		return err
	}
	_, err = w.Write(blob)
	return err
}

// ReadMessage reads one message written by WriteMessage.
func ReadMessage(r *bufio.Reader, env *Envelope) (blob []byte, err error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	jn, bn := binary.BigEndian.Uint32(hdr[0:]), binary.BigEndian.Uint32(hdr[4:])
	if jn > MaxHeader || bn > MaxBlob+MaxHeader {
		return nil, fmt.Errorf("%w (%d bytes of JSON, %d of data)", ErrTooLarge, jn, bn)
	}
	buf := make([]byte, int(jn)+int(bn))
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	*env = Envelope{}
	if err := json.Unmarshal(buf[:jn], env); err != nil {
		return nil, fmt.Errorf("guest: malformed message: %w", err)
	}
	if bn == 0 {
		return nil, nil
	}
	return buf[jn:], nil
}
