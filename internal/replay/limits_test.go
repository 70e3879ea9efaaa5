package replay

import (
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
)

// TestCollapseRules: which events of a sequence the collapse step keeps,
// limit by limit, as the documentation says.
func TestCollapseRules(t *testing.T) {
	t.Parallel()
	base := time.Now().Add(-time.Hour).Truncate(time.Minute) // on a window edge of every limit below
	tests := []struct {
		name   string
		limits string
		// each event: its user and its offset from base
		users []string
		at    []time.Duration
		kept  string // "k" kept, "c" collapsed, one letter per event
	}{
		{"fixed 1/10s: once per user per window", `[{name: user, key: ["header:X-User-Id"], rate: 1/10s}]`,
			[]string{"a", "a", "b", "a", "a"}, []time.Duration{0, 9 * time.Second, time.Second, 10 * time.Second, 19 * time.Second}, "kckkc"},
		{"fixed 2/10s: the first two", `[{name: user, key: ["header:X-User-Id"], rate: 2/10s}]`,
			[]string{"a", "a", "a"}, []time.Duration{0, 1, 2}, "kkc"},
		{"align first: from the first kept event", `[{name: user, key: ["header:X-User-Id"], rate: 1/10s, align: first}]`,
			[]string{"a", "a", "a"}, []time.Duration{5 * time.Second, 14 * time.Second, 15 * time.Second}, "kck"},
		{"sliding: any interval of its length", `[{name: user, key: ["header:X-User-Id"], rate: 1/10s, algorithm: sliding_window}]`,
			[]string{"a", "a", "a"}, []time.Duration{5 * time.Second, 12 * time.Second, 15 * time.Second}, "kck"},
		{"token bucket: a full bucket, then as it refills", `[{name: user, key: ["header:X-User-Id"], rate: 1/s, burst: 2, algorithm: token_bucket}]`,
			[]string{"a", "a", "a", "a"}, []time.Duration{0, 1, 2, time.Second + 2}, "kkck"},
		{"shared limits never collapse", `[{name: api, key: [route], rate: 1/10s}, {name: all, key: [global, route], rate: 1/10s}]`,
			[]string{"a", "b", "a"}, []time.Duration{0, 1, 2}, "kkk"},
		{"concurrency never collapses", `[{name: inflight, key: ["header:X-User-Id"], algorithm: concurrency, limit: 1}]`,
			[]string{"a", "a"}, []time.Duration{0, 1}, "kk"},
		{"any client-keyed limit collapses", `[{name: user, key: ["header:X-User-Id"], rate: 10/10s}, {name: ip, key: [ip], rate: 2/10s}]`,
			[]string{"a", "b", "c"}, []time.Duration{0, 1, 2}, "kkc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse("test.yaml", []byte(`
routes:
  - id: r
    match: {path: /x}
    upstream: {targets: ["http://127.0.0.1:9"]}
    limits: `+tt.limits+`
`))
			if err != nil {
				t.Fatal(err)
			}
			rec, err := NewRecorded(cfg, "r", nil)
			if err != nil {
				t.Fatal(err)
			}
			c := newCollapser(100)
			defer c.Close()
			got := ""
			for i, user := range tt.users {
				e := &events.Event{Time: base.Add(tt.at[i]), Keys: map[string][]string{
					"user": {user}, "inflight": {user}, "ip": {"10.0.0.1"}, "api": {"r"}, "all": {"-", "r"},
				}}
				if c.collapses(e, rec.Limits(e)) == "" {
					got += "k"
				} else {
					got += "c"
				}
			}
			if got != tt.kept {
				t.Errorf("kept %s, want %s", got, tt.kept)
			}
		})
	}
	// A time from a clock ahead of this one is not placed.
	cfg, _ := config.Parse("test.yaml", []byte(`
routes:
  - id: r
    match: {path: /x}
    upstream: {targets: ["http://127.0.0.1:9"]}
    limits: [{name: user, key: ["header:X-User-Id"], rate: 1/d}]
`))
	rec, _ := NewRecorded(cfg, "r", nil)
	c := newCollapser(100)
	defer c.Close()
	for range 2 {
		e := &events.Event{Time: time.Now().Add(time.Hour), Keys: map[string][]string{"user": {"a"}}}
		if name := c.collapses(e, rec.Limits(e)); name != "" {
			t.Errorf("an event from the future collapsed by %s", name)
		}
	}
}
