package config

import "github.com/floodgate-gw/floodgate/internal/yamlnode"

// Error is one problem of a config file, at a line: File, the name the
// config was loaded or parsed under; Line, 1-based, or 0 when the problem
// has no line, as when the file cannot be read; and Msg, what is wrong,
// starting with the path of the value at fault ("routes[0].limits[1].rate:
// ...") when there is one, and never holding a secret.
//
// Its Error method formats the problem as "FILE:LINE: message", the form
// editors and CI annotations recognise, or "FILE: message" when it has no
// line; Warning formats it as "FILE:LINE: warning: message"; Unwrap returns
// its cause, if it has one. The problems of rate-limit rule files
// (package rls) are of the same type.
type Error = yamlnode.Error

// Errors is every problem Parse or Load found, sorted by line. It is the
// error they return; callers may range over it after errors.As. Its Error
// method prints one problem per line, and its Unwrap lets errors.Is and
// errors.As look at each problem.
type Errors = yamlnode.Errors
