//go:build unix

package events

import (
	"errors"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock on path, so that two gateways pointed at
// one spool_dir fail at start instead of interleaving their appends and
// deleting each other's segments. The kernel drops the lock when the
// process dies, so a crash never leaves a stale lock behind.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errors.New("in use by another floodgate process (or another recorder in this one)")
		}
		return nil, err
	}
	return f, nil
}
