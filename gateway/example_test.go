package gateway_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway"
)

// A gateway in front of one upstream, with a limit of one request a
// minute per X-User-Id: the first request goes through, the second is
// answered 429 by the gateway.
func Example() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the upstream\n")
	}))
	defer upstream.Close()

	cfg, err := config.Parse("floodgate.yaml", []byte(`
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["`+upstream.URL+`"]}
    limits:
      - {name: per_user, key: ["header:X-User-Id"], rate: 1/min}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	gw, err := gateway.New(cfg, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer gw.Close()
	srv := httptest.NewServer(gw)
	defer srv.Close()

	for i := 1; i <= 2; i++ {
		req, _ := http.NewRequest("GET", srv.URL+"/api/orders", nil)
		req.Header.Set("X-User-Id", "alice")
		req.Header.Set("X-Request-Id", fmt.Sprintf("example-%d", i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s", resp.StatusCode, body)
	}
	// Output:
	// 200 hello from the upstream
	// 429 {"code":"rate_limited","message":"Too many requests, try again later","request_id":"example-2"}
}
