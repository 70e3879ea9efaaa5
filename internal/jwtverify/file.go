package jwtverify

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// fileDebounce is how long a JWKS file must be quiet after a change before
// it is read: a save is several events (truncate, write, rename), and the
// set should be read once, whole.
const fileDebounce = 200 * time.Millisecond

// fileSource keeps a Verifier's keys those of a JWKS file.
type fileSource struct {
	path string
	v    *Verifier

	mu      sync.Mutex
	loaded  time.Time // when the keys in use were read
	refused error     // why the file's present content is not in use; nil when it is
}

// load reads the file and installs its keys. A file that does not load
// leaves the keys as they are; the first load's error is New's.
func (f *fileSource) load(now time.Time) error {
	ks, err := ReadKeySetFile(f.path)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if !f.loaded.IsZero() {
			f.refused = err
			f.v.log.Error("JWKS file changed but does not load; the keys loaded before still verify",
				"jwks_file", f.path, "keys_loaded", f.loaded.UTC().Format(time.RFC3339), "error", err.Error())
		}
		return err
	}
	f.loaded, f.refused = now, nil
	if f.v.setKeys(ks) {
		f.v.log.Info("JWKS loaded", "jwks_file", f.path, "keys", ks.Len(), "skipped", ks.Skipped())
	}
	return nil
}

func (f *fileSource) status() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refused != nil {
		return fmt.Errorf("jwks_file %s: its present content is refused (%v); the keys loaded at %s still verify",
			f.path, f.refused, f.loaded.UTC().Format(time.RFC3339))
	}
	return nil
}

// watch reloads the file whenever it changes, until stop is closed. It
// watches the file's directory, as the config file's watch does: a file
// replaced by a rename, or a Kubernetes volume's "..data" link swapped,
// would be lost to a watch on the file itself.
func (f *fileSource) watch(stop <-chan struct{}, wg *sync.WaitGroup) error {
	abs, err := filepath.Abs(f.path)
	if err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		w.Close()
		return err
	}
	name := filepath.Base(abs)
	wg.Go(func() {
		defer w.Close()
		timer := time.NewTimer(fileDebounce)
		timer.Stop()
		defer timer.Stop()
		var due <-chan time.Time
		for {
			select {
			case <-stop:
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if base := filepath.Base(ev.Name); base != name && base != "..data" || ev.Op&^fsnotify.Chmod == 0 {
					continue
				}
				timer.Reset(fileDebounce)
				due = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				f.v.log.Warn("watching the JWKS file", "jwks_file", f.path, "error", err.Error())
			case <-due:
				due = nil
				f.load(time.Now())
			}
		}
	})
	return nil
}
