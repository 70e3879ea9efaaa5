//go:build unix

package accesslog

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// openAppend opens name for append, created 0640, and only if it is a
// regular file. The open itself must not block: opening a named pipe for
// writing waits for a reader, for ever if none comes, and a reload that
// waits holds every later one behind it. So the file is opened
// non-blocking (a pipe without a reader then fails with ENXIO), checked to
// be a regular file, and set back to blocking before os.NewFile sees it,
// so that it is an ordinary blocking file. O_NOCTTY keeps a terminal
// from becoming the process's own.
func openAppend(name string) (*os.File, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(name, syscall.O_WRONLY|syscall.O_APPEND|syscall.O_CREAT|
			syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0o640)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	var st syscall.Stat_t
	if err = syscall.Fstat(fd, &st); err != nil {
		err = &os.PathError{Op: "fstat", Path: name, Err: err}
	} else if m := fileType(st.Mode); !m.IsRegular() {
		err = notRegularError(name, m)
	} else if err = syscall.SetNonblock(fd, false); err != nil {
		err = &os.PathError{Op: "open", Path: name, Err: err}
	}
	if err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// fileType is the fs.FileMode type bits of a stat mode.
func fileType(mode uint32) fs.FileMode {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return 0
	case syscall.S_IFDIR:
		return fs.ModeDir
	case syscall.S_IFIFO:
		return fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		return fs.ModeSocket
	case syscall.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		return fs.ModeDevice
	}
	return fs.ModeIrregular
}
