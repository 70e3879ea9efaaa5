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
}
