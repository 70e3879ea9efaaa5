// Package filewatch calls a function when a file changes, as editors,
// deployment tools and Kubernetes change files: it watches the file's
// directory, not the file (a file replaced by a rename would leave a
// watch on the old inode seeing nothing), counts a swap of Kubernetes'
// "..data" entry as a change of every file it mounts, and waits for a
// change to be quiet before it calls, so that a file saved in several
// writes is read once, whole.
package filewatch

import (
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Debounce is how long a file must be quiet before a change is reported:
// saving a file is several events (truncate, write, rename).
const Debounce = 200 * time.Millisecond

// Dir calls fire once a change to a file of dir that wanted accepts
// (by base name) has been followed by Debounce of quiet, until the
// returned function is called. A bare chmod (touch, a permission fix)
// does not change what a file says, and is no change.
func Dir(dir string, wanted func(base string) bool, fire func(), warn func(error)) (stop func(), err error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, err
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var due <-chan time.Time
		timer := time.NewTimer(Debounce)
		timer.Stop()
		defer timer.Stop()
		for {
			select {
			case <-done:
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if !wanted(filepath.Base(ev.Name)) || ev.Op&^fsnotify.Chmod == 0 {
					continue
				}
				timer.Reset(Debounce)
				due = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				warn(err)
			case <-due:
				due = nil
				fire()
			}
		}
	})
	return func() {
		close(done)
		w.Close()
		wg.Wait()
	}, nil
}

// Files calls reload when one of paths changes, watching the
// directory of each, as Dir does: a
// rename over the file, and Kubernetes' "..data" swap of a mounted
// secret, are changes too. Empty paths are skipped.
func Files(paths []string, reload func(), warn func(dir string, err error)) (stop func(), err error) {
	names := map[string]map[string]bool{} // directory -> base names
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		dir := filepath.Dir(abs)
		if names[dir] == nil {
			names[dir] = map[string]bool{"..data": true}
		}
		names[dir][filepath.Base(abs)] = true
	}
	var stops []func()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	for dir, base := range names {
		s, err := Dir(dir, func(b string) bool { return base[b] }, reload, func(err error) { warn(dir, err) })
		if err != nil {
			stopAll()
			return nil, err
		}
		stops = append(stops, s)
	}
	return stopAll, nil
}
