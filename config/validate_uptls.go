package config

import (
	"fmt"
	"strings"
)

// upstreamTLS checks upstream.tls: a route with an https target to apply
// it to, a certificate and key both given or neither, matching, and a CA
// file that holds certificates. The files are read here so that check and
// reload refuse what the gateway could not load.
func (v *validator) upstreamTLS(u *Upstream, p string) {
	t := u.TLS
	if t == nil {
		return
	}
	p += ".tls"
	if v.failed(p) {
		return
	}
	if len(u.Targets) > 0 && !v.failed(strings.TrimSuffix(p, ".tls")+".targets") {
		https := false
		for _, target := range u.Targets {
			https = https || target.Scheme == "https"
		}
		if !https {
			v.errorf(p, "set, but every target is http://, so no connection would use it: give https:// targets or leave tls out")
		}
	}
	v.halfPair(p, t.Cert, t.Key)
	if t.CA == "" && v.has(p+".ca") {
		v.errorf(p+".ca", "empty: leave it out to verify the targets against the system's roots")
	}
	if sn := t.ServerName; strings.Contains(sn, "://") || strings.ContainsAny(sn, " \t/") {
		v.errorf(p+".server_name", "%q is not a host name: give the name the targets' certificates hold, such as api.internal", sn)
	}
	v.keyPair(p, t.Cert, t.Key, "targets that verify client certificates will refuse it")
	v.certPool(p+".ca", t.CA)
	if t.InsecureSkipVerify {
		what := "set ca to the CA that signs the targets' certificates instead"
		if t.CA != "" {
			what = fmt.Sprintf("ca %q is not used; leave insecure_skip_verify out to verify against it", t.CA)
		}
		v.warnf(p+".insecure_skip_verify", "the targets' certificates are not verified: whoever is on the path to them can read and change the traffic; %s", what)
	}
}
