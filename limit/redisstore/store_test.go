package redisstore

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// t0 is aligned on every window the tests use, plus a millisecond.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, int(time.Millisecond), time.UTC)

// slack is how much later than its deadline a call may return on a busy
// machine running the race detector.
const slack = 250 * time.Millisecond

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{}, "no Redis address"},
		{Options{Addrs: []string{"a:1", "b:1"}}, "2 addresses"},
		{Options{Addrs: []string{"localhost"}}, `address "localhost"`},
		{Options{Addrs: []string{"a:1"}, Prefix: "fg{x}:"}, "brace"},
		{Options{Addrs: []string{"a:1"}, Prefix: "}"}, "brace"},
		{Options{Addrs: []string{"a:1"}, Timeout: -time.Second}, "timeout -1s is negative"},
		{Options{Addrs: []string{"a:1"}, DB: -1}, "db -1"},
	} {
		s, err := New(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.opts, err, tc.want)
		}
		if s != nil {
			t.Errorf("New(%+v) returned a store with its error", tc.opts)
		}
	}
}

func TestDefaults(t *testing.T) {
	s, err := New(Options{Addrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.prefix != DefaultPrefix || s.timeout != DefaultTimeout {
		t.Fatalf("prefix %q timeout %v, want %q and %v", s.prefix, s.timeout, DefaultPrefix, DefaultTimeout)
	}
}

// TestAtomicUnderConcurrency sends 100 requests of one user at once: the
// user limit admits one, and the api limit, which every one of them
// passes, shows exactly one consumption.
func TestAtomicUnderConcurrency(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv)
	user := valid(t, &limit.Rule{Name: "r:user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: 10 * time.Second}})
	api := valid(t, &limit.Rule{Name: "r:api", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: time.Second}})
	route := limit.StringKey("route")
	at(t, s, t0)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			res, err := s.Decide(context.Background(), &limit.Request{
				Limits: []limit.Limit{{Rule: user, Key: limit.StringKey("u1")}, {Rule: api, Key: route}},
				Now:    time.Now(),
			})
			if err != nil {
				t.Error(err)
				return
			}
			if res.Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != 1 {
		t.Fatalf("%d admitted, want 1", n)
	}
	st, err := s.Peek(context.Background(), time.Now(), api, route)
	if err != nil {
		t.Fatal(err)
	}
	if st.Remaining != 4 {
		t.Fatalf("api remaining %d, want 4: rejected requests consumed quota", st.Remaining)
	}
}

// TestExpiries checks the PTTL every algorithm gives its key: it lasts as
// long as the state matters, and no longer (but for the spread of aligned
// windows).
func TestExpiries(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv)
	k := limit.StringKey("a")
	for _, tc := range []struct {
		rule *limit.Rule
		hits int64
		want time.Duration
	}{
		// The window began at t0-1ms and ends at t0+999ms.
		{&limit.Rule{Name: "e:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: time.Second}}, 1, 0},
		{&limit.Rule{Name: "e:first", Align: limit.AlignFirst, Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: time.Second}}, 1, time.Second},
		{&limit.Rule{Name: "e:sliding", Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 5, Period: 2 * time.Second}}, 1, 2 * time.Second},
		{&limit.Rule{Name: "e:bucket", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 10, Period: time.Second}, Burst: 5}, 3, 300 * time.Millisecond},
		{&limit.Rule{Name: "e:conc", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 5}, LeaseTTL: 3 * time.Second}, 1, 3 * time.Second},
	} {
		valid(t, tc.rule)
		at(t, s, t0.Add(399*time.Millisecond))
		start := time.Now()
		res, err := s.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{{Rule: tc.rule, Key: k}}, Hits: tc.hits, Lease: "l", Now: time.Now()})
		if err != nil || !res.Allowed {
			t.Fatalf("%s: %+v, %v", tc.rule.Name, res, err)
		}
		ms, _ := strconv.Atoi(srv.Do(t, "PTTL", core.StoredKey(DefaultPrefix, tc.rule, k)))
		want := tc.want
		if want == 0 {
			want = t0.Add(999 * time.Millisecond).Sub(res.Time)
		}
		// The key's life is counted from the decision, rounded up to a
		// millisecond on a clock Redis reads in whole milliseconds; the PTTL
		// was read up to elapsed later. A window aligned to the clock lives
		// on for up to min(window, 60 s) more, so that the keys of one
		// window do not all expire at once.
		want = want.Round(time.Millisecond) + time.Millisecond
		spread := time.Duration(0)
		if tc.want == 0 {
			spread = min(tc.rule.Rate.Period, time.Minute)
		}
		elapsed := time.Since(start)
		if got := time.Duration(ms) * time.Millisecond; got > want+spread || got < want-elapsed-2*time.Millisecond {
			t.Errorf("%s: PTTL %v, want %v to %v (less up to %v)", tc.rule.Name, got, want, want+spread, elapsed)
		}
	}
}

// TestAlignedExpirySpread: the keys of one clock-aligned window, opened at
// different times within it, expire at different times after its end, so
// that Redis does not delete them all in one expire cycle.
func TestAlignedExpirySpread(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	rule := valid(t, &limit.Rule{Name: "spread", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: 10 * time.Second}})
	end := t0.Add(10*time.Second - time.Millisecond) // the window began at t0-1ms
	var beyond []time.Duration
	for i := range 40 {
		at(t, s, t0.Add(time.Duration(i)*233*time.Millisecond))
		k := limit.StringKey("user" + strconv.Itoa(i))
		sent := time.Now()
		res, err := s.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{{Rule: rule, Key: k}}, Hits: 1, Now: time.Now()})
		if err != nil || !res.Allowed {
			t.Fatalf("%+v, %v", res, err)
		}
		ms, _ := strconv.Atoi(srv.Do(t, "PTTL", core.StoredKey(DefaultPrefix, rule, k)))
		// The key's life counted down, in Redis's real time, for at most
		// took before PTTL read it: a loaded machine's milliseconds.
		took := time.Since(sent)
		b := time.Duration(ms)*time.Millisecond - end.Sub(res.Time)
		if b+took < -time.Millisecond || b > 10*time.Second+time.Millisecond {
			t.Fatalf("key %d lives %v beyond its window, want 0 to 10s", i, b)
		}
		beyond = append(beyond, b)
	}
	slices.Sort(beyond)
	if spread := beyond[len(beyond)-1] - beyond[0]; spread < 5*time.Second {
		t.Fatalf("40 keys opened over 9.3 s expire within %v of each other after the window, want them spread over most of 10 s: %v", spread, beyond)
	}
}

// TestLeases: releases are idempotent, a renewal extends only a lease
// still held, and a lease with a shorter life never cuts the key's.
func TestLeases(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv)
	ctx := context.Background()
	long := valid(t, &limit.Rule{Name: "l:conc", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 3}, LeaseTTL: 10 * time.Second})
	short := valid(t, &limit.Rule{Name: "l:conc", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 3}, LeaseTTL: 2 * time.Second})
	k := limit.StringKey("a")
	key := core.StoredKey(DefaultPrefix, long, k)
	acquire := func(r *limit.Rule, lease string) {
		t.Helper()
		res, err := s.Decide(ctx, &limit.Request{Limits: []limit.Limit{{Rule: r, Key: k}}, Lease: lease, Now: time.Now()})
		if err != nil || !res.Allowed {
			t.Fatalf("lease %s: %+v, %v", lease, res, err)
		}
	}
	pttl := func() int {
		t.Helper()
		ms, _ := strconv.Atoi(srv.Do(t, "PTTL", key))
		return ms
	}
	at(t, s, t0)
	acquire(long, "a")
	acquire(short, "b")
	if ms := pttl(); ms < 8000 {
		t.Fatalf("PTTL %d ms after a 2 s lease joined a 10 s one: the key's life was cut", ms)
	}
	if err := s.Renew(ctx, time.Now(), "b", limit.Limit{Rule: short, Key: k}); err != nil {
		t.Fatal(err)
	}
	if ms := pttl(); ms < 8000 {
		t.Fatalf("PTTL %d ms after renewing the 2 s lease", ms)
	}
	for range 2 {
		if err := s.Release(ctx, "b", limit.Limit{Rule: short, Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Renew(ctx, time.Now(), "b", limit.Limit{Rule: short, Key: k}); err != nil {
		t.Fatal(err)
	}
	if got := srv.Do(t, "ZSCORE", key, "b"); got != "(nil)" {
		t.Fatalf("a released lease was renewed back: score %s", got)
	}

	// Once every lease has run out, renewing one resurrects nothing.
	at(t, s, t0.Add(11*time.Second))
	before := srv.Do(t, "ZSCORE", key, "a")
	if err := s.Renew(ctx, time.Now(), "a", limit.Limit{Rule: long, Key: k}); err != nil {
		t.Fatal(err)
	}
	if after := srv.Do(t, "ZSCORE", key, "a"); after != before {
		t.Fatalf("an expired lease was renewed: score %s -> %s", before, after)
	}
	st, err := s.Peek(ctx, time.Now(), long, k)
	if err != nil || st.InFlight != 0 || st.Remaining != 3 {
		t.Fatalf("peek after the leases expired: %+v, %v", st, err)
	}

	// Renew and Release ignore limits that are not concurrency limits.
	other := valid(t, &limit.Rule{Name: "l:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Second}})
	if err := s.Release(ctx, "a", limit.Limit{Rule: other, Key: k}); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, time.Now(), "a", limit.Limit{Rule: other, Key: k}); err != nil {
		t.Fatal(err)
	}
}

// TestHostileKeys: a megabyte value and values full of braces and
// newlines give bounded key names with the one hash tag intact.
func TestHostileKeys(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv)
	r := valid(t, &limit.Rule{Name: "k:user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Minute}})
	hostile := []limit.Key{
		limit.StringKey(strings.Repeat("x", 1<<20)),
		limit.StringKey(strings.Repeat("x", 1<<20) + "y"),
		limit.NewKey(limit.Part{Kind: "header:x-user-id", Value: "{slot}"}),
		limit.NewKey(limit.Part{Kind: "header:x-user-id", Value: "}{\n\r{}"}),
		limit.NewKey(limit.Part{Kind: "header:x-user-id", Value: strings.Repeat("{\n}", 1000)}),
	}
	for i, k := range hostile {
		res, err := s.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{{Rule: r, Key: k}}, Now: time.Now()})
		if err != nil || !res.Allowed {
			t.Fatalf("key %d: %+v, %v", i, res, err)
		}
	}
	stored := srv.Keys(t)
	if len(stored) != len(hostile) {
		t.Fatalf("%d keys stored for %d distinct values", len(stored), len(hostile))
	}
	for _, k := range stored {
		if len(k) > 1024 || strings.ContainsAny(k, "\r\n") {
			t.Errorf("stored key %.80q... is %d bytes", k, len(k))
		}
		lb, rb := strings.IndexByte(k, '{'), strings.IndexByte(k, '}')
		if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 || lb > rb || !strings.HasPrefix(k[lb+1:], r.Name+":") {
			t.Errorf("stored key %q does not hold exactly the limit's hash tag", k)
		}
	}
}

// TestClocksDisagree: two gateways whose clocks are 5 s apart share one
// fixed window, because Redis TIME, not the caller, decides.
func TestClocksDisagree(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	a, b := open(t, srv), open(t, srv)
	at(t, a, t0)
	b.SetOffset(a.Offset())
	r := valid(t, &limit.Rule{Name: "c:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 4, Period: 10 * time.Second}})
	l := []limit.Limit{{Rule: r, Key: limit.StringKey("u")}}
	admitted := 0
	for i := range 8 {
		s, skew := a, time.Duration(0)
		if i%2 == 1 {
			s, skew = b, 5*time.Second
		}
		res, err := s.Decide(context.Background(), &limit.Request{Limits: l, Now: t0.Add(skew)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			admitted++
		}
		if d := res.Decisions[0].ResetAfter; d > 10*time.Second-time.Millisecond || d < 9*time.Second {
			t.Fatalf("request %d: reset after %v, want the window that began at t0", i, d)
		}
	}
	if admitted != 4 {
		t.Fatalf("%d admitted in one window of 4", admitted)
	}
}

func TestAuthAndDB(t *testing.T) {
	srv := testredis.Start(t, testredis.WithArgs("--requirepass", "secret"))
	t.Cleanup(func() { srv.CheckExpiry(t) })
	r := valid(t, &limit.Rule{Name: "a:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Second}})
	req := &limit.Request{Limits: []limit.Limit{{Rule: r, Key: limit.StringKey("u")}}, Now: time.Now()}

	s := open(t, srv, func(o *Options) { o.Password, o.DB = "secret", 3 })
	if _, err := s.Decide(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if info := srv.Do(t, "INFO", "keyspace"); !strings.Contains(info, "db3:keys=1,") || strings.Contains(info, "db0:") {
		t.Fatalf("the key is not in db 3 alone:\n%s", info)
	}

	wrong := open(t, srv, func(o *Options) { o.Password = "wrong" })
	_, err := wrong.Decide(context.Background(), req)
	if !errors.Is(err, limit.ErrStoreUnavailable) || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("Decide with a wrong password: %v, want store unavailable naming WRONGPASS", err)
	}
}

// TestScriptFlushed: after SCRIPT FLUSH (or a restart) EVALSHA answers
// NOSCRIPT and the store sends the script itself.
func TestScriptFlushed(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv)
	r := valid(t, &limit.Rule{Name: "s:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: time.Minute}})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u")}
	for i := range 3 {
		srv.Do(t, "SCRIPT", "FLUSH")
		res, err := s.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{l}, Now: time.Now()})
		if err != nil || res.Decisions[0].Remaining != int64(2-i) {
			t.Fatalf("decision %d after SCRIPT FLUSH: %+v, %v", i, res, err)
		}
	}
}

func TestNoLimits(t *testing.T) {
	s, err := New(Options{Addrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	res, err := s.Decide(context.Background(), &limit.Request{Now: now})
	if err != nil || !res.Allowed || len(res.Decisions) != 0 || !res.Time.Equal(now) {
		t.Fatalf("Decide without limits: %+v, %v", res, err)
	}
	bad := &limit.Rule{Name: "bad", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 0, Period: time.Second}}
	if _, err := s.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{{Rule: bad}}}); err == nil || errors.Is(err, limit.ErrStoreUnavailable) {
		t.Fatalf("Decide with an invalid rule: %v, want a validation error", err)
	}
}

// unavailableWithin runs every call of the store and checks that each
// fails with limit.ErrStoreUnavailable within d.
func unavailableWithin(t *testing.T, s *Store, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	fixed := valid(t, &limit.Rule{Name: "u:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Second}})
	conc := valid(t, &limit.Rule{Name: "u:conc", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 1}})
	k := limit.StringKey("u")
	for name, call := range map[string]func() error{
		"Decide": func() error {
			_, err := s.Decide(ctx, &limit.Request{Limits: []limit.Limit{{Rule: fixed, Key: k}}, Now: time.Now()})
			return err
		},
		"Peek": func() error {
			_, err := s.Peek(ctx, time.Now(), fixed, k)
			return err
		},
		"Reset":   func() error { return s.Reset(ctx, fixed, k) },
		"Release": func() error { return s.Release(ctx, "l", limit.Limit{Rule: conc, Key: k}) },
		"Renew":   func() error { return s.Renew(ctx, time.Now(), "l", limit.Limit{Rule: conc, Key: k}) },
	} {
		start := time.Now()
		err := call()
		if took := time.Since(start); took > d {
			t.Errorf("%s took %v, want at most %v", name, took, d)
		}
		if !errors.Is(err, limit.ErrStoreUnavailable) {
			t.Errorf("%s: %v, want an error wrapping limit.ErrStoreUnavailable", name, err)
		}
	}
}

func TestDeadRedis(t *testing.T) {
	srv := testredis.Start(t)
	base := runtime.NumGoroutine()
	s, err := New(Options{Addrs: []string{srv.Addr()}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := valid(t, &limit.Rule{Name: "d:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 10, Period: time.Second}})
	eventually(t, func() error {
		_, err := s.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{{Rule: r, Key: "u"}}, Now: time.Now()})
		return err
	})
	srv.Stop()
	unavailableWithin(t, s, 100*time.Millisecond+slack)
	s.Close()
	unavailableWithin(t, s, slack)
	settled(t, base)
}

// TestSlowRedis blocks Redis (CLIENT PAUSE, then DEBUG SLEEP) and expects
// decisions to fail within the store's timeout, then to succeed again.
func TestSlowRedis(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	const timeout = 50 * time.Millisecond
	s := open(t, srv, func(o *Options) { o.Timeout = timeout })
	r := valid(t, &limit.Rule{Name: "w:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 100, Period: time.Minute}})
	req := func() *limit.Request {
		return &limit.Request{Limits: []limit.Limit{{Rule: r, Key: "u"}}, Now: time.Now()}
	}
	decide := func() (time.Duration, error) {
		start := time.Now()
		_, err := s.Decide(context.Background(), req())
		return time.Since(start), err
	}
	recovered := func() {
		t.Helper()
		eventually(t, func() error {
			_, err := decide()
			return err
		})
	}
	recovered()

	srv.Do(t, "CLIENT", "PAUSE", "800", "ALL")
	took, err := decide()
	if !errors.Is(err, limit.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Decide against a paused Redis: %v, want unavailable and the deadline", err)
	}
	if took > timeout+slack {
		t.Fatalf("Decide against a paused Redis took %v, timeout %v", took, timeout)
	}
	recovered()

	// DEBUG SLEEP blocks the connection that sends it, so it runs in its
	// own goroutine; decisions are tried until one meets the sleeping server.
	slept := make(chan struct{})
	go func() {
		defer close(slept)
		_, _ = srv.DoValue(t, "DEBUG", "SLEEP", "0.8")
	}()
	for {
		took, err := decide()
		if err != nil {
			if !errors.Is(err, limit.ErrStoreUnavailable) || took > timeout+slack {
				t.Fatalf("Decide against a sleeping Redis: %v after %v", err, took)
			}
			break
		}
		select {
		case <-slept:
			t.Fatal("every decision succeeded while Redis slept")
		case <-time.After(5 * time.Millisecond):
		}
	}
	<-slept
	recovered()
}

// TestConnectsLater: a store made while Redis is down fails fast, then
// decides once Redis is up.
func TestConnectsLater(t *testing.T) {
	srv := testredis.Start(t)
	srv.Stop()
	base := runtime.NumGoroutine()
	s, err := New(Options{Addrs: []string{srv.Addr()}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("New with Redis down: %v", err)
	}
	unavailableWithin(t, s, slack)
	srv.Restart()
	r := valid(t, &limit.Rule{Name: "l:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Second}})
	eventually(t, func() error {
		_, err := s.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{{Rule: r, Key: "u"}}, Now: time.Now()})
		return err
	})
	srv.CheckExpiry(t)
	s.Close()
	settled(t, base+1) // testredis waits for the restarted server in a goroutine
}

// TestCloseLeavesNoGoroutine closes a busy store and one still trying to
// connect.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	base := runtime.NumGoroutine()
	s, err := New(Options{Addrs: []string{srv.Addr()}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := valid(t, &limit.Rule{Name: "g:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1000, Period: time.Second}})
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			k := limit.StringKey(strconv.Itoa(i))
			for range 20 {
				if _, err := s.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{{Rule: r, Key: k}}, Now: time.Now()}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	s.Close()
	settled(t, base)

	down, err := New(Options{Addrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // a few reconnection attempts
	down.Close()
	settled(t, base)
}

// settled waits for the goroutines to come back to base, and fails with
// their stacks if they do not.
func settled(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			var b bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Fatalf("%d goroutines, %d before the store:\n%s", runtime.NumGoroutine(), base, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// eventually retries f until it succeeds, for up to two seconds: the time
// a store gets to come back to a Redis that is up again (or, on a busy
// machine, to make its first connection inside a short timeout).
func eventually(t *testing.T, f func() error) {
	t.Helper()
	within(t, 2*time.Second, f)
}

// within retries f until it succeeds, for up to d: what real servers do in
// their own time (a pause ending, a restart, a failover) is waited for,
// never slept on.
func within(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %v: %v", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOldHashLayout: a fixed window that an older version of the script
// left as a hash {s, c} is read as no window, by Decide and by Peek, and
// the next admission replaces it with the string layout, with an expiry.
func TestOldHashLayout(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv)
	r := valid(t, &limit.Rule{Name: "o:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: time.Minute}})
	k := limit.StringKey("u")
	key := core.StoredKey(DefaultPrefix, r, k)
	at(t, s, t0)
	srv.Do(t, "HSET", key, "s", strconv.FormatInt(t0.Add(-time.Millisecond).UnixMicro(), 10), "c", "4")
	srv.Do(t, "PEXPIRE", key, "60000")

	st, err := s.Peek(context.Background(), time.Now(), r, k)
	if err != nil || st.Remaining != 5 {
		t.Fatalf("peek at a hash: %+v, %v; want 5 remaining", st, err)
	}
	res, err := s.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{{Rule: r, Key: k}}, Now: time.Now()})
	if err != nil || !res.Allowed || res.Decisions[0].Remaining != 4 {
		t.Fatalf("decide on a hash: %+v, %v; want admitted with 4 remaining", res, err)
	}
	if typ := srv.Do(t, "TYPE", key); typ != "string" {
		t.Fatalf("the key is a %s after an admission, want a string", typ)
	}
}

// TestDecideCommand replays the command DecideCommand gives, as
// bench/redis.sh does with redis-benchmark, and gets a decision's reply.
func TestDecideCommand(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv)
	fixed := valid(t, &limit.Rule{Name: "c:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: time.Minute}})
	bucket := valid(t, &limit.Rule{Name: "c:bucket", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 5, Period: time.Second}})
	req := &limit.Request{Limits: []limit.Limit{{Rule: fixed, Key: "a"}, {Rule: bucket, Key: "a"}}, Now: time.Now()}
	cmd, err := s.DecideCommand(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if cmd[0] != "EVALSHA" || cmd[2] != "2" {
		t.Fatalf("command %q", cmd)
	}
	for want := int64(4); want >= 3; want-- {
		v, err := srv.DoValue(t, cmd...)
		if err != nil {
			t.Fatal(err)
		}
		reply := v.([]any)
		if len(reply) != 7 || reply[1] != want || reply[3] != int64(0) {
			t.Fatalf("reply %v, want 7 numbers, the fixed window admitting with %d remaining", reply, want)
		}
	}
}

// TestStoresShareRules: a rule keeps the first key it is decided on
// (storedKey), and two stores with their own prefixes that share the rule
// still keep their own counters, as does every other key of the rule.
func TestStoresShareRules(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	a := open(t, srv, func(o *Options) { o.Prefix = "a:" })
	b := open(t, srv, func(o *Options) { o.Prefix = "b:" })
	rule := valid(t, &limit.Rule{Name: "once", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	decide := func(s *Store, key string) bool {
		t.Helper()
		res, err := s.Decide(context.Background(), &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: rule, Key: limit.StringKey(key)}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Allowed
	}
	for _, step := range []struct {
		s    *Store
		key  string
		want bool
	}{
		{a, "x", true}, {a, "x", false}, {b, "x", true}, {b, "x", false}, {a, "y", true}, {b, "y", true}, {a, "y", false},
	} {
		if got := decide(step.s, step.key); got != step.want {
			t.Fatalf("store %s, key %s: allowed %v, want %v", step.s.prefix, step.key, got, step.want)
		}
	}
	for _, p := range []string{"a:", "b:"} {
		for _, k := range []string{"x", "y"} {
			if got := srv.Do(t, "EXISTS", core.StoredKey(p, rule, limit.StringKey(k))); got != "1" {
				t.Errorf("%s: EXISTS %s", core.StoredKey(p, rule, limit.StringKey(k)), got)
			}
		}
	}
}
