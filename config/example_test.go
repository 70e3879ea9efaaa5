package config_test

import (
	"errors"
	"fmt"

	"github.com/floodgate-gw/floodgate/config"
)

func ExampleParse() {
	cfg, err := config.Parse("floodgate.yaml", []byte(`
routes:
  - id: lucky-meal
    match: {path: /api/activities/lucky-meal/receive, methods: [POST]}
    upstream: {targets: ["http://127.0.0.1:9000"]}
    limits:
      - name: user
        key: [header:X-User-Id, path]
        fallback: [ip]
        rate: 1/10s
        reject: {code: repeat_apply, message: "You have already taken part"}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	l := cfg.Routes[0].Limits[0]
	fmt.Println(cfg.Summary())
	fmt.Println(l.Rule.Name, l.Rule.Algorithm, l.Rule.Rate)
	fmt.Println(cfg.Message("repeat_apply"))
	// Output:
	// floodgate.yaml: ok: 1 route, 1 limit, store memory, admin 127.0.0.1:9090
	// lucky-meal:user fixed_window 1/10s
	// You have already taken part
}

func ExampleErrors() {
	_, err := config.Parse("floodgate.yaml", []byte(`
routes:
  - id: lucky-meal
    match: {path: /receive}
    upstream: {targets: ["127.0.0.1:9000"]}
    limits:
      - name: user
        key: [user]
        rate: 0/s
`))
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Printf("line %d: %s\n", e.Line, e.Msg)
		}
	}
	// Output:
	// line 5: routes[0].upstream.targets[0]: "127.0.0.1:9000" is not an absolute http(s) URL (write it as http://127.0.0.1:9000)
	// line 8: routes[0].limits[0].key[0]: unknown key source "user" (global, route, path, method, host, ip, header:NAME, query:NAME, cookie:NAME, jwt:CLAIM, tls:subject)
	// line 9: routes[0].limits[0].rate: rate "0/s": count 0 must be positive
}

func ExampleParseWithFlags() {
	file := []byte(`
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["http://127.0.0.1:9000"]}
`)
	// "floodgate serve --admin ADDR": the address is held to the rules
	// of admin.listen, and a problem with it names the flag.
	for _, addr := range []string{"127.0.0.1:9191", "0.0.0.0:9090"} {
		cfg, err := config.ParseWithFlags("floodgate.yaml", file, config.Flags{
			AdminListen: &config.Flag{Name: "--admin", Value: addr},
		})
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(cfg.Summary())
	}
	// Output:
	// floodgate.yaml: ok: 1 route, 0 limits, store memory, admin 127.0.0.1:9191
	// floodgate.yaml: --admin: "0.0.0.0:9090" is not loopback (0.0.0.0 means every interface) and admin.token is not set, so anyone who reaches it may reload the config, reset limits and force breakers; set admin.token or admin.token_env, or write admin.allow_open: true to accept an open admin API
}
