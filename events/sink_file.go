package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// fileSink appends each event as one JSON line and fsyncs once per batch.
type fileSink struct {
	path string

	mu   sync.Mutex
	f    *os.File
	size int64 // the file's length after the last good write
	buf  []byte
}

func newFileSink(path string) *fileSink { return &fileSink{path: path} }

func (s *fileSink) name() string { return "file " + s.path }

// open opens the file on first use. A crash in the middle of a write can
// leave a partial last line that was never fsynced, hence never
// acknowledged; it is cut, so the next line does not run into it.
func (s *fileSink) open() error {
	if s.f != nil {
		return nil
	}
	// O_APPEND makes each batch one append even if the operator points
	// two gateways at one file by mistake.
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	size, err := completeLines(f)
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil && st.Size() != size {
			if err = f.Truncate(size); err == nil {
				err = f.Sync()
			}
		}
	}
	if err != nil {
		f.Close()
		return err
	}
	s.f, s.size = f, size
	return nil
}

// completeLines returns the length of f up to and including its last
// newline.
func completeLines(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := st.Size()
	buf := make([]byte, 64<<10)
	for end > 0 {
		n := min(int64(len(buf)), end)
		if _, err := f.ReadAt(buf[:n], end-n); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return end - n + int64(i) + 1, nil
		}
		end -= n
	}
	return 0, nil
}

func (s *fileSink) deliver(_ context.Context, recs []record) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.open(); err != nil {
		return 0, err
	}
	s.buf = s.buf[:0]
	for i := range recs {
		s.buf = append(s.buf, recs[i].data...)
		s.buf = append(s.buf, '\n')
	}
	_, err := s.f.Write(s.buf)
	if err == nil {
		err = s.f.Sync()
	}
	if err != nil {
		// Cut what may have landed, so a retry does not leave a
		// partial line in the middle of the file.
		if terr := s.f.Truncate(s.size); terr != nil {
			s.f.Close()
			s.f = nil // reopen, and cut the partial line, next time
		}
		return 0, fmt.Errorf("writing %s: %w", s.path, err)
	}
	s.size += int64(len(s.buf))
	return len(recs), nil
}

func (s *fileSink) probe(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open()
}

func (s *fileSink) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
