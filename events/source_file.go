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

// line returns the next complete line from r and its end offset. A last
// line without its newline is being written, or was torn by a crash; it is
// left for later.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, io.EOF
	}
	return line, nil
}

func (s *fileSource) Next(context.Context) (*Event, error) {
	if s.f == nil {
		return nil, io.EOF
	}
	for {
		line, err := readLine(s.r)
		if err != nil {
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
		s.pos += int64(len(line))
		if e, ok := s.m.decode(s.path+":"+strconv.FormatInt(s.pos-int64(len(line)), 10), line); ok {
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
		line, err := readLine(r)
		if err != nil {
			return nil
		}
		if e, ok := s.m.decode(s.path+":"+strconv.FormatInt(pos, 10), line); ok && !fn(e) {
			return nil
		}
		pos += int64(len(line))
	}
}

func (s *fileSource) Close() error {
	if s.f != nil {
		return s.f.Close()
	}
	return nil
}
