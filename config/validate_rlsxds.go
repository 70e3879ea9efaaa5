package config

// rlsXDS checks rls.xds: a server address and a node id, and no rule
// directory beside it. envoyproxy/ratelimit reads its rules from one
// provider, files or xDS; two sources of one domain's rules would leave it
// to the order of their updates which one holds, so both are refused.
func (v *validator) rlsXDS(r *RLS) {
	x := r.XDS
	if x == nil {
		return
	}
	const p = "rls.xds"
	if r.Listen == "" {
		v.errorf(p, "set, but rls.listen is empty, so no service would use it")
	}
	if r.ConfigDir != "" {
		v.errorf(p, "set beside rls.config_dir: the rules come from files or from xDS, not both; keep one")
	}
	if x.Addr == "" {
		v.errorf(p+".addr", "missing: the management server's HOST:PORT")
	} else {
		v.addr(p+".addr", x.Addr, true)
	}
	if x.NodeID == "" {
		v.errorf(p+".node_id", "missing: the node id the management server knows this service by")
	}
	v.rlsXDSTLS(x.TLS)
}

// rlsXDSTLS checks rls.xds.tls as the client loads it: a CA file that
// holds certificates, and a client certificate and key given together,
// PEM, matching each other.
func (v *validator) rlsXDSTLS(t *RLSXDSTLS) {
	if t == nil {
		return
	}
	const p = "rls.xds.tls"
	// An empty value written out is a mistake more often than a choice:
	// leaving it out says the same.
	if t.CA == "" && v.has(p+".ca") {
		v.errorf(p+".ca", "empty: leave it out to verify the server by the system's roots")
	}
	if t.ServerName == "" && v.has(p+".server_name") {
		v.errorf(p+".server_name", "empty: leave it out to verify the host of rls.xds.addr")
	}
	switch {
	case t.Cert == "" && t.Key != "":
		v.errorf(p+".cert", "empty, but key is set: give the certificate of the key")
	case t.Cert != "" && t.Key == "":
		v.errorf(p+".key", "empty, but cert is set: give the private key of the certificate")
	}
	v.certPool(p+".ca", t.CA)
	v.keyPair(p, t.Cert, t.Key, "the management server will refuse it")
}
