package config

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// adminOpen refuses an admin listener that other machines may reach while
// /admin/* has no token, unless the file accepts it with allow_open: anyone
// who reaches it could reload the config, reset limits and force breakers.
// It runs after token_env is resolved; a token_env that failed has its own
// error, and an address that does not parse has one too.
func (v *validator) adminOpen(a *Admin) {
	if a.Listen == "" || a.Token != "" || a.TokenEnv != "" || len(a.Tokens) > 0 || a.AllowOpen {
		return
	}
	host, _, err := net.SplitHostPort(a.Listen)
	if err != nil {
		return
	}
	loopback, why := loopbackHost(host)
	if loopback {
		return
	}
	if why != "" {
		why = " (" + why + ")"
	}
	v.errorf("admin.listen", "%q is not loopback%s and admin.token is not set, so anyone who reaches it may "+
		"reload the config, reset limits and force breakers; set admin.token or admin.token_env, "+
		"or write admin.allow_open: true to accept an open admin API", redactAddr(a.Listen), why)
}

// loopbackHost reports whether a listener on host is reachable from this
// machine only; when it is not, why says what the host means, if that is
// not plain from it.
//
// Only literal loopback addresses and the name localhost count. Any other
// name may resolve to any address, now or after a change of DNS, and
// "127.0.0.1.example.com" is such a name. An IPv4-mapped IPv6 address is
// the IPv4 address it maps, as net.Listen binds it: [::ffff:127.0.0.1] is
// loopback, [::ffff:0.0.0.0] every interface.
func loopbackHost(host string) (loopback bool, why string) {
	if host == "" {
		return false, "an empty host means every interface"
	}
	if strings.EqualFold(host, "localhost") {
		return true, ""
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false, "a host name other than localhost may resolve to any address"
	}
	ip = ip.Unmap()
	switch {
	case ip.IsLoopback():
		return true, ""
	case ip.IsUnspecified():
		return false, host + " means every interface"
	}
	return false, ""
}

// A Flag is a value the command line gives in place of the file's.
type Flag struct {
	// Name is the flag as the command line spells it ("--admin"). A
	// problem of Value is reported under it, without a line: the value
	// is not in the file.
	Name string

	// Value replaces the file's value, or its default.
	Value string
}

// Flags are the values a command line gives in place of the file's, for
// ParseWithFlags. A nil field leaves the file's value.
type Flags struct {
	// AdminListen replaces admin.listen, as "floodgate serve --admin
	// ADDR" does. Its value is held to every rule of admin.listen: an
	// address beyond loopback needs admin.token, admin.token_env or
	// admin.allow_open in the file.
	AdminListen *Flag

	// Listen replaces server.listen, as "floodgate serve --listen ADDR"
	// does.
	Listen *Flag
}

// setFlags puts the flags' values in c before it is validated, and
// remembers which paths they gave.
func (v *validator) setFlags(c *Config, f Flags) {
	v.flags = map[string]string{}
	if f.AdminListen != nil {
		c.Admin.Listen = f.AdminListen.Value
		v.flags["admin.listen"] = f.AdminListen.Name
	}
	if f.Listen != nil {
		c.Server.Listen = f.Listen.Value
		v.flags["server.listen"] = f.Listen.Name
	}
}

// where says where the value at path came from, for a message that points
// at a second value: "line 12", or the flag that gave it.
func (v *validator) where(p string) string {
	if f, ok := v.flags[p]; ok {
		return f
	}
	return "line " + strconv.Itoa(v.line(p))
}
