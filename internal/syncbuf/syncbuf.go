// Package syncbuf is a bytes.Buffer that one goroutine may write while
// another reads it: a child process's output, or a log, that a test
// reads as it goes.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent use. Its zero value is empty.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
