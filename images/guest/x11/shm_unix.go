//go:build linux || darwin

package x11

import "golang.org/x/sys/unix"

// The System V shared memory calls MIT-SHM capture needs, where the OS has them.

func shmCreate(size int) (int, error) {
	return unix.SysvShmGet(unix.IPC_PRIVATE, size, unix.IPC_CREAT|0o600)
}

func shmAttach(id int) ([]byte, error) { return unix.SysvShmAttach(id, 0, 0) }

func shmRemove(id int) { unix.SysvShmCtl(id, unix.IPC_RMID, nil) }

func shmDetach(b []byte) { unix.SysvShmDetach(b) }
