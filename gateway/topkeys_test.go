package gateway

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTopRejected(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, flashSale, up)
	const path = "/api/activities/lucky-meal/receive"
	send := func(user string, n int) {
		for range n {
			drain(h.do("POST", path, map[string]string{"X-User-Id": user}, nil))
		}
	}
	send("42", 5) // 1 admitted, 4 rejected
	send("7", 2)  // 1 admitted, 1 rejected
	send("9", 1)  // admitted: never shown

	top, err := h.gw.TopRejected("lucky-meal", "user", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []TopKey{{Key: []string{"42", path}, Count: 4}, {Key: []string{"7", path}, Count: 1}}
	if len(top.Keys) != len(want) {
		t.Fatalf("top keys %+v, want %+v", top.Keys, want)
	}
	for i := range want {
		if !slices.Equal(top.Keys[i].Key, want[i].Key) || top.Keys[i].Count != want[i].Count || top.Keys[i].Error != 0 {
			t.Errorf("top key %d: %+v, want %+v", i, top.Keys[i], want[i])
		}
	}
	if top.Since.IsZero() || top.Since.After(h.clock.Now()) {
		t.Errorf("since %v", top.Since)
	}
	if top, _ := h.gw.TopRejected("lucky-meal", "user", 1); len(top.Keys) != 1 {
		t.Errorf("n=1 gave %d keys", len(top.Keys))
	}
	if top, _ := h.gw.TopRejected("lucky-meal", "api", 10); len(top.Keys) != 0 {
		t.Errorf("a limit that rejected nothing shows %+v", top.Keys)
	}
	for _, c := range [][2]string{{"lucky-meal", "nope"}, {"nope", "user"}, {"global", "user"}, {"lucky-meal", "global"}} {
		if _, err := h.gw.TopRejected(c[0], c[1], 10); !errors.Is(err, ErrNoLimit) {
			t.Errorf("TopRejected(%q, %q): %v, want ErrNoLimit", c[0], c[1], err)
		}
	}
	if _, err := h.gw.TopRejected("global", "global", 10); err != nil {
		t.Errorf("the global limit: %v", err)
	}

	// The counts outlive a reload that keeps the limit; a reload without
	// it forgets them.
	if err := h.gw.Reload(mustParseT(t, strings.ReplaceAll(flashSale, "{{UP}}", up.URL))); err != nil {
		t.Fatal(err)
	}
	if top, _ := h.gw.TopRejected("lucky-meal", "user", 10); len(top.Keys) != 2 || top.Keys[0].Count != 4 {
		t.Errorf("after a reload: %+v", top.Keys)
	}
	without := strings.Replace(strings.ReplaceAll(flashSale, "{{UP}}", up.URL), "name: user", "name: member", 1)
	if err := h.gw.Reload(mustParseT(t, without)); err != nil {
		t.Fatal(err)
	}
	if err := h.gw.Reload(mustParseT(t, strings.ReplaceAll(flashSale, "{{UP}}", up.URL))); err != nil {
		t.Fatal(err)
	}
	if top, _ := h.gw.TopRejected("lucky-meal", "user", 10); len(top.Keys) != 0 {
		t.Errorf("a limit removed and added again kept %+v", top.Keys)
	}

	// Ten minutes later the keys rejected before are gone.
	send("42", 1)
	h.clock.Step(11 * time.Minute)
	if top, _ := h.gw.TopRejected("lucky-meal", "user", 10); len(top.Keys) != 0 {
		t.Errorf("11 minutes on: %+v", top.Keys)
	}
}

// TestTopRejectedConcurrent counts every rejection of requests sent at
// once from many goroutines.
func TestTopRejectedConcurrent(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, flashSale, up)
	const path = "/api/activities/lucky-meal/receive"
	const goroutines, each = 8, 25
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				// Two users: every request but each user's first is
				// rejected by the user limit.
				user := []string{"a", "b"}[g%2]
				drain(h.do("POST", path, map[string]string{"X-User-Id": user}, nil))
			}
		}()
	}
	wg.Wait()
	top, err := h.gw.TopRejected("lucky-meal", "user", 10)
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, k := range top.Keys {
		total += k.Count
	}
	if len(top.Keys) != 2 || total != goroutines*each-2 {
		t.Errorf("top keys %+v: %d rejections counted, want %d", top.Keys, total, goroutines*each-2)
	}
}

func TestTopKeyEncoding(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 1000)
	for _, vs := range [][]string{{"a"}, {"a", "b"}, {"", "a|b"}, {"42", "/p"}, {long}, {"a", long}} {
		l := &limitSpec{}
		l.top = newTopSketch()
		l.countRejected(time.Now(), vs)
		es, _ := l.top.Top(time.Now(), 1)
		got, cut := decodeTopKey(es[0].Key)
		isLong := len(strings.Join(vs, "")) > 200
		if !isLong && (cut || !slices.Equal(got, vs)) {
			t.Errorf("%q read back as %q (cut %v)", vs, got, cut)
		}
		if isLong && !cut && !es[0].Truncated {
			t.Errorf("a long key %d bytes is not marked cut", len(strings.Join(vs, "")))
		}
		if len(es[0].Key) > 257 {
			t.Errorf("a key of %d bytes kept", len(es[0].Key))
		}
	}
}
