// Package filekind names the kind of a file that is not a regular one, for
// the messages that refuse it: a log must go to a file, and a named pipe
// with no reader blocks the writer that opens it, a directory cannot be
// written, and a device is a stream that others own.
package filekind

import "io/fs"

// NotRegular is what m's file is, as a message says it ("a named pipe
// (FIFO)"), or "" when it is a regular file.
func NotRegular(m fs.FileMode) string {
	switch t := m.Type(); {
	case t.IsRegular():
		return ""
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a block device"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}
