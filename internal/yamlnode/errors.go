package yamlnode

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem of a file, at a line. config exports it as
// config.Error, and every reader of floodgate's files reports with it.
type Error struct {
	// File is the name the file was loaded or parsed under.
	File string
	// Line is 1-based; 0 when the problem has no line, as when the file
	// cannot be read.
	Line int
	// Msg says what is wrong, starting with the path of the value at
	// fault ("routes[0].limits[1].rate: ...") when there is one. It never
	// holds a secret.
	Msg string

	err error // the cause, for errors.Is and errors.As
}

// WithCause returns e with err as the cause that Unwrap returns. It is a
// function rather than a field so that config.Error, an alias of Error,
// exports no more than it did.
func WithCause(e Error, err error) Error {
	e.err = err
	return e
}

// Error formats the problem as "FILE:LINE: message", the form editors and
// CI annotations recognise, or "FILE: message" when it has no line.
func (e Error) Error() string {
	if e.Line <= 0 {
		return e.File + ": " + e.Msg
	}
	return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
}

// Warning formats the problem as a warning: "FILE:LINE: warning: message".
func (e Error) Warning() string {
	e.Msg = "warning: " + e.Msg
	return e.Error()
}

// Unwrap returns the cause of the problem, if it has one.
func (e Error) Unwrap() error { return e.err }

// Errors is every problem found in a file, or in several, sorted by line
// within each file. Its text is one problem per line, as errors.Join's is.
type Errors []Error

// Error prints one problem per line.
func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap lets errors.Is and errors.As look at each problem.
func (es Errors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// Sort orders the problems of one file by line, keeping the order of
// discovery within a line, and drops exact repeats: an anchor read through
// several aliases reports its problems once. It reuses es. (A function
// rather than a method, so that config.Errors gains no method.)
func Sort(es Errors) Errors {
	seen := make(map[Error]bool, len(es))
	out := es[:0]
	for _, e := range es {
		k := Error{File: e.File, Line: e.Line, Msg: e.Msg}
		if !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b Error) int { return cmp.Compare(a.Line, b.Line) })
	return out
}
