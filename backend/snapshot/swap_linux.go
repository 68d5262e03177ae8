package snapshot

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// exchange swaps the directories a and b in one rename (renameat2 RENAME_EXCHANGE): no moment
// exists at which b is missing or half-filled.
func exchange(a, b string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		return fmt.Errorf("%w: %v", errNoExchange, err)
	}
	return nil
}
