//lint:file-ignore SA1019 programs built on x/net/http2's client before net/http had Protocols still use it

package gateway

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"

	"golang.org/x/net/http2"
)

// xnetH2C is x/net/http2's client speaking HTTP/2 with prior knowledge.
func xnetH2C() http.RoundTripper {
	return &http2.Transport{
		AllowHTTP:          true,
		DisableCompression: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}
