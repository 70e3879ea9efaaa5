package events

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

type fileSource struct {
	path    string
	offPath string
	m       matcher

	f        *os.File // nil: the file does not exist, nothing was recorded
	r        *bufio.Reader
	pos      int64 // where r reads next
	saved    int64 // the offset in offPath
	inFlight map[*Event]int64
	atEnd    bool // the last Next found no more
}

func openFileSource(path string, m matcher) (*fileSource, error) {
	s := &fileSource{path: path, offPath: ReplayOffsetFile(path, m.route), m: m, inFlight: map[*Event]int64{}}
	b, err := os.ReadFile(s.offPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("events: %w", err)
	default:
		if s.saved, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil || s.saved < 0 {
			return nil, fmt.Errorf("events: %s does not hold an offset", s.offPath)
		}
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	s.f = f
	s.pos = s.saved
	s.r = bufio.NewReaderSize(io.NewSectionReader(f, s.pos, 1<<62), 256<<10)
	return s, nil
}

// readLine returns the next complete line from r, with its newline. A
// last line without its newline is being written, or was torn by a crash;
// it is left for later (io.EOF). A line longer than max (0: any) is read
// through without being kept: line is nil and n its length.
func readLine(r *bufio.Reader, max int64) (line []byte, n int64, err error) {
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		n += int64(len(chunk))
		if max > 0 && n > max {
			tooLong, line = true, nil
		}
		if !tooLong {
			line = append(line, chunk...)
		}
		switch {
		case err == nil && tooLong:
			return nil, n, nil
		case err == nil:
			return line, n, nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, n, io.EOF
		}
	}
}

func (s *fileSource) Next(context.Context) (*Event, error) {
	if s.f == nil {
		return nil, io.EOF
	}
	s.atEnd = false
	for {
		line, n, err := readLine(s.r, s.m.max)
		if err != nil {
			s.atEnd = true
			// Past the end, the lines read were all other routes' or
			// types': remember that, unless an event is still in flight
			// before them.
			if len(s.inFlight) == 0 && s.pos > s.saved {
				if err := s.save(s.pos); err != nil {
					return nil, err
				}
			}
			return nil, io.EOF
		}
		at := s.pos
		s.pos += n
		if line == nil {
			s.m.tooLong(n, "file", s.path, "offset", at)
			continue
		}
		if e, ok := s.m.decode(line, "file", s.path, "offset", at); ok {
			s.inFlight[e] = s.pos
			return e, nil
		}
	}
}

func (s *fileSource) Done(_ context.Context, e *Event) error {
	end, ok := s.inFlight[e]
	if !ok {
		return fmt.Errorf("events: Done with an event Next did not return")
	}
	delete(s.inFlight, e)
	if s.atEnd && len(s.inFlight) == 0 && s.pos > s.saved {
		// The last one done after Next found the end: past the lines
		// passed over after it too.
		return s.save(s.pos)
	}
	if lazyDone(e) {
		// Saved with the next Done's offset, which is past it, or at the
		// end, as the lines passed over are: no fsync for each.
		return nil
	}
	return s.save(end)
}

// save replaces the offset file atomically: written aside, fsynced,
// renamed over the old one, and the directory fsynced, so that a crash
// leaves either offset, never a torn one.
func (s *fileSource) save(off int64) error {
	tmp := s.offPath + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	_, err = f.WriteString(strconv.FormatInt(off, 10) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.offPath)
	}
	if err == nil {
		err = syncDir(filepath.Dir(s.offPath))
	}
	if err != nil {
		return fmt.Errorf("events: saving the replay offset: %w", err)
	}
	s.saved = off
	return nil
}

func (s *fileSource) Pending(_ context.Context, fn func(*Event) bool) error {
	if s.f == nil {
		return nil
	}
	r := bufio.NewReaderSize(io.NewSectionReader(s.f, s.saved, 1<<62), 256<<10)
	pos := s.saved
	for {
		line, n, err := readLine(r, s.m.max)
		if err != nil {
			return nil
		}
		if line == nil {
			s.m.tooLong(n, "file", s.path, "offset", pos)
		} else if e, ok := s.m.decode(line, "file", s.path, "offset", pos); ok && !fn(e) {
			return nil
		}
		pos += n
	}
}

func (s *fileSource) Close() error {
	if s.f != nil {
		return s.f.Close()
	}
	return nil
}
