//go:build !unix

package events

import "os"

// lockDir only creates the lock file where flock is unavailable; running
// two gateways on one spool_dir there is the operator's mistake to avoid.
func lockDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}
