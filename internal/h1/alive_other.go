//go:build !unix

package h1

import "net"

// peeker cannot peek here; a connection the server closed is found out
// when it is used, and a request safe to repeat is sent again.
type peeker struct{}

func (*peeker) init(net.Conn) {}

func (*peeker) alive() bool { return true }
