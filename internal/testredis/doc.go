// Package testredis starts real redis-server processes for tests.
//
// Tests that exercise Redis behaviour (expiry, scripting, cluster
// redirections, timeouts against a stalled or dead server) are only
// trustworthy against the real server, so this package never mocks: it runs
// the redis-server binary found on PATH (Redis 7.0 or newer, for
// --enable-debug-command, CLUSTER ADDSLOTSRANGE and SENTINEL DEBUG). A
// missing binary fails the test instead of skipping it, so a misconfigured
// CI machine cannot turn the Redis tests into silent no-ops.
//
// Every server listens on a fresh 127.0.0.1 port chosen at start, never on
// the default 6379, so tests cannot touch a Redis that happens to run on the
// machine and can run in parallel with each other. Persistence is disabled
// and each server works in its own tb.TempDir(), so nothing survives a test.
// Servers are stopped and reaped by tb.Cleanup; if the test binary itself
// dies, Linux kills the servers with it (PR_SET_PDEATHSIG).
//
// Typical use:
//
//	srv := testredis.Start(t)
//	client := newClient(srv.Addr())
//	...
//	if got := srv.Do(t, "PTTL", "key"); got == "-1" {
//		t.Fatal("key has no expiry")
//	}
//	srv.Stop() // the client should now see a dead Redis
//
// StartCluster runs a Redis Cluster; StartSentinel runs a master with
// replicas and the sentinels that monitor it, and can fail it over, so a
// client that follows failovers can be tested against the real thing:
//
//	s := testredis.StartSentinel(t, 1, 3)
//	client := newSentinelClient(s.Addrs(), testredis.MasterName)
//	...
//	s.Failover(t) // the master dies; a replica takes over
//
// Do, DoValue, Restart and the Sentinel methods report fatal problems
// through testing.TB, so like t.Fatal they must be called from the test's
// own goroutine.
package testredis
