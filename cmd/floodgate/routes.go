package main

import (
	"github.com/floodgate-gw/floodgate/admin"
	"github.com/floodgate-gw/floodgate/gateway"
)

var _ admin.RouteViewer = adminBackend{}

// Routes backs GET /admin/routes: the routes with their targets' health.
func (b adminBackend) Routes() []gateway.RouteStatus { return b.s.gw.Routes() }
