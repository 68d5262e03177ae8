//go:build !linux && !darwin

package x11

import "errors"

// Without System V shared memory, capture uses GetImage over the connection.

var errNoSHM = errors.New("x11: no System V shared memory on this OS")

func shmCreate(size int) (int, error) { return 0, errNoSHM }

func shmAttach(id int) ([]byte, error) { return nil, errNoSHM }

func shmRemove(id int) {}

func shmDetach(b []byte) {}
