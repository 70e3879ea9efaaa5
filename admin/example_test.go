package admin_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/admin"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway"
)

// backend makes a gateway an admin.Backend: a reload re-reads the file.
// (floodgate serve's own backend also serializes reloads with SIGHUP and
// the file watch.)
type backend struct {
	*gateway.Gateway
	file string
}

func (b backend) Reload() error {
	cfg, err := config.Load(b.file)
	if err != nil {
		return err
	}
	return b.Gateway.Reload(cfg)
}

func ExampleNewHandler() {
	cfg, err := config.Parse("floodgate.yaml", []byte(`
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["http://127.0.0.1:9000"]}
    limits:
      - {name: user, key: [header:X-User-Id], rate: 100/min}
`))
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	gw, err := gateway.New(cfg, gateway.Options{Logger: slog.New(slog.DiscardHandler), Registerer: reg})
	if err != nil {
		panic(err)
	}
	defer gw.Close()
	h := admin.NewHandler(backend{gw, "floodgate.yaml"}, reg, nil)

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1:9090/healthz", nil))
	fmt.Print(w.Code, " ", w.Body)

	// The state of user u1's key, read without consuming it.
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1:9090/admin/limits?route=api&limit=user&key=u1", nil))
	var s struct {
		Algorithm string
		Limit     int64
		Window    float64
		Remaining int64
	}
	json.Unmarshal(w.Body.Bytes(), &s)
	fmt.Println(w.Code, s.Algorithm, s.Limit, s.Window, s.Remaining)
	// Output:
	// 200 {"status":"ok"}
	// 200 fixed_window 100 60 100
}
