package overlay_test

import (
	"fmt"
	"log"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/overlay"
)

const file = `
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["http://127.0.0.1:9000"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: 100/min}
      - {name: bucket, key: [route], algorithm: token_bucket, rate: 10/s}
`

// An operator raises a user's limit for a sale, and asks to change a
// limit that a reload removed from this instance's file. The file's config
// is not changed.
func ExampleApply() {
	cfg, err := config.Parse("floodgate.yaml", []byte(file))
	if err != nil {
		log.Fatal(err)
	}
	set := map[string]overlay.Override{
		overlay.Name("api", "user"):  {Route: "api", Limit: "user", Change: overlay.Change{Rate: "300/min"}},
		overlay.Name("api", "login"): {Route: "api", Limit: "login", Change: overlay.Change{Rate: "1/s"}},
	}
	running, skipped := overlay.Apply(cfg, set)
	fmt.Println("file:", overlay.FindLimit(cfg, "api", "user").Rate)
	fmt.Println("running:", overlay.FindLimit(running, "api", "user").Rate)
	fmt.Println("not applied:", skipped["api/login"])
	// Output:
	// file: 100/min
	// running: 300/min
	// not applied: this instance's config has no limit "login" on route "api"
}

// A token bucket whose burst is its rate's count takes the new rate's
// count; a value the limit cannot take is an *Error naming its field.
func ExampleAdjust() {
	cfg, err := config.Parse("floodgate.yaml", []byte(file))
	if err != nil {
		log.Fatal(err)
	}
	bucket := overlay.FindLimit(cfg, "api", "bucket")
	n, _ := overlay.Adjust(bucket, overlay.Change{Rate: "50/s"})
	fmt.Println(n.Rate, "burst", n.Burst)
	_, err = overlay.Adjust(overlay.FindLimit(cfg, "api", "user"), overlay.Change{Burst: 20})
	fmt.Println(err)
	// Output:
	// 50/s burst 50
	// burst: burst applies to token_bucket only (algorithm is fixed_window)
}

// What does not depend on the limit is checked before the limit is looked
// up.
func ExampleCheck() {
	shadow := true
	fmt.Println(overlay.Check(overlay.Request{Change: overlay.Change{Shadow: &shadow}, Reason: "misbehaves", By: "alice"}))
	fmt.Println(overlay.Check(overlay.Request{Change: overlay.Change{Shadow: &shadow}, TTL: 31 * 24 * time.Hour}))
	fmt.Println(overlay.Check(overlay.Request{Reason: "sale"}))
	// Output:
	// <nil>
	// ttl: 744h0m0s: at most 720h0m0s (30 days)
	// override: nothing to change: give rate (or limit for concurrency), burst, shadow or enabled
}

// With the memory store, a reload that removes a limit ends its override.
func ExampleWithoutGone() {
	cfg, err := config.Parse("floodgate.yaml", []byte(file))
	if err != nil {
		log.Fatal(err)
	}
	set := map[string]overlay.Override{
		"api/user":  {Route: "api", Limit: "user", Change: overlay.Change{Rate: "300/min"}},
		"api/login": {Route: "api", Limit: "login", Change: overlay.Change{Rate: "1/s"}},
	}
	kept, gone := overlay.WithoutGone(cfg, set)
	fmt.Println(len(kept), "kept;", "gone:", gone[0].Limit)
	// Output: 1 kept; gone: login
}
