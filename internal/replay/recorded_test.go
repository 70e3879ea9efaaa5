package replay

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/gateway"
)

// TestRecordedKeys: the keys Recorded builds from an event are the ones
// the gateway counted the request's client on, the fallback key included,
// global limits first and shared ones marked.
func TestRecordedKeys(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(up.Close)
	file := filepath.Join(t.TempDir(), "events.jsonl")
	h := newGateway(t, up.URL, `
admin: {listen: ""}
events:
  sink: file
  file: {path: "`+file+`"}
  headers: [X-User-Id, X-Tier]
global_limits:
  - {name: all, key: [global], rate: 100/min}
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - name: user
        key: ["header:X-User-Id"]
        fallback: [ip]
        rate: 1/min
        overrides: [{header: {name: X-Tier, value: vip}, rate: 5/min}]
      - {name: api, key: [route], rate: 50/s}
      - {name: team, key: ["header:X-Team"], on_missing: allow, rate: 1/min}
    breaker: {enabled: true}
    fallback: {record: true}
`)
	// u1 and the client without a user id (its ip) use their quota.
	h.answer(t, "POST", "/coupon", map[string]string{"X-User-Id": "u1"})
	h.answer(t, "POST", "/coupon", nil)
	if err := h.gw.ForceBreaker("coupon", "open", 0); err != nil {
		t.Fatal(err)
	}
	for _, hdr := range []map[string]string{{"X-User-Id": "u1"}, nil} {
		if m := h.answer(t, "POST", "/coupon", hdr); m["code"] != "service_unavailable" || m["recorded"] != true {
			t.Fatalf("answer %v: want recorded", m)
		}
	}
	var evs []*events.Event
	deadline := time.Now().Add(3 * time.Second)
	for len(evs) < 2 && time.Now().Before(deadline) {
		data, _ := os.ReadFile(file)
		evs = nil
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var e events.Event
			if json.Unmarshal([]byte(l), &e) == nil {
				evs = append(evs, &e)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
	byUser, byIP := evs[0], evs[1]
	if !slices.Equal(byUser.Keys["user"], []string{"u1"}) || byUser.Fallback != nil || !slices.Equal(byUser.Keys["all"], []string{"-"}) {
		t.Errorf("u1's event: keys %v, fallback %v", byUser.Keys, byUser.Fallback)
	}
	if !slices.Equal(byIP.Keys["user"], []string{"127.0.0.1"}) || !slices.Equal(byIP.Fallback, []string{"user"}) {
		t.Errorf("the event without a user id: keys %v, fallback %v; want the ip, marked as the fallback", byIP.Keys, byIP.Fallback)
	}

	rec, err := NewRecorded(h.gw.Config(), "coupon", nil)
	if err != nil {
		t.Fatal(err)
	}
	store := h.gw.Store()
	remaining := func(l RecordedLimit) int64 {
		t.Helper()
		st, err := store.Peek(context.Background(), h.now, l.Rule, l.Key)
		if err != nil {
			t.Fatal(err)
		}
		return st.Remaining
	}
	for _, e := range []*events.Event{byUser, byIP} {
		ls := rec.Limits(e)
		var names []string
		for _, l := range ls {
			names = append(names, l.Name)
			if l.Err != nil {
				t.Errorf("%s: %v", l.Name, l.Err)
			}
		}
		// team: on_missing allow, and no key recorded: not decided.
		if !slices.Equal(names, []string{"all", "user", "api"}) {
			t.Fatalf("limits %v, want all, user, api", names)
		}
		if !ls[0].Global || !ls[0].Shared || ls[1].Global || ls[1].Shared || !ls[2].Shared {
			t.Errorf("global/shared: %+v", ls)
		}
		if n := remaining(ls[1]); n != 0 {
			t.Errorf("event %v: the user key has %d left; the gateway counted its request on it", e.Keys, n)
		}
		if n := remaining(ls[0]); n != 98 {
			t.Errorf("the global key has %d left, want 98", n)
		}
	}

	// The same value, not marked as the fallback, is another key: a user
	// whose id is "127.0.0.1".
	forged := &events.Event{Keys: map[string][]string{"user": {"127.0.0.1"}}}
	if ls := rec.Limits(forged); remaining(ls[1]) != 1 {
		t.Errorf("user id 127.0.0.1 reads as the ip's key")
	}
	// An override by header is chosen by the recorded headers.
	vip := &events.Event{Keys: map[string][]string{"user": {"u9"}}, Headers: map[string][]string{"X-Tier": {"vip"}}}
	if ls := rec.Limits(vip); ls[1].Rule.Rate.Count != 5 {
		t.Errorf("vip's rule %v, want the override's 5/min", ls[1].Rule.Rate)
	}
	// Without keys: the shared limits still apply; the user's is unkeyed.
	for _, e := range []*events.Event{
		{},
		{Keys: map[string][]string{"user": {"  "}}},
		{Keys: map[string][]string{"user": {"a", "b"}}},
	} {
		ls := rec.Limits(e)
		if len(ls) != 3 || ls[0].Err != nil || !errors.Is(ls[1].Err, ErrNoRecordedKey) || ls[1].Rule != nil {
			t.Errorf("event with keys %v: %+v; want the user limit unkeyed", e.Keys, ls)
		}
	}
	if _, err := NewRecorded(h.gw.Config(), "nope", nil); !errors.Is(err, gateway.ErrNoLimit) {
		t.Errorf("NewRecorded of an unknown route: %v", err)
	}
}

// gatewayRig is a gateway on a frozen clock, served over HTTP.
type gatewayRig struct {
	gw  *gateway.Gateway
	srv *httptest.Server
	now time.Time // the gateway's clock, which does not move
}

// newGateway serves yaml, with {{UP}} the upstream's URL up.
func newGateway(t *testing.T, up, yaml string) *gatewayRig {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(strings.ReplaceAll(yaml, "{{UP}}", up)))
	if err != nil {
		t.Fatal(err)
	}
	h := &gatewayRig{now: time.Now()}
	h.gw, err = gateway.New(cfg, gateway.Options{
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return h.now },
		RecordWait: 10 * time.Second, // what is recorded is checked, not how fast the disk is
	})
	if err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewServer(h.gw)
	t.Cleanup(func() {
		h.srv.Close()
		h.gw.Close()
	})
	return h
}

// answer sends a request and returns its JSON answer (nil: the body is
// not JSON).
func (h *gatewayRig) answer(t *testing.T, method, path string, hdr map[string]string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if json.NewDecoder(resp.Body).Decode(&m) != nil {
		return nil
	}
	return m
}
