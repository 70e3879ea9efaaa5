package redisstore

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/exhausted"
)

// DefaultPrefix starts every stored key when Options.Prefix is empty.
const DefaultPrefix = "fg:"

// DefaultTimeout is the budget of one call when Options.Timeout is zero.
const DefaultTimeout = 50 * time.Millisecond

const (
	// The first connection is retried with a backoff that stays short, so
	// that a store whose Redis starts late is deciding within half a second
	// of Redis answering.
	minBackoff = 20 * time.Millisecond
	maxBackoff = 500 * time.Millisecond

	// minConnectTimeout bounds the connection attempts of New and of the
	// background loop; the dials that calls make themselves are bounded by
	// Options.Timeout instead.
	minConnectTimeout = time.Second

	// maxFlushDelay is rueidis's ClientOption.MaxFlushDelay.
	maxFlushDelay = 20 * time.Microsecond

	// sentinelRefresh is how often the store asks the sentinels which
	// server is the master (rueidis recommends a few seconds).
	sentinelRefresh = 5 * time.Second
)

// Mode is how a Store reaches Redis.
type Mode string

const (
	// Standalone is one Redis server.
	Standalone Mode = "standalone"
	// Cluster is a Redis Cluster: Addrs are seed nodes, the store learns
	// the others and follows MOVED and ASK redirections.
	Cluster Mode = "cluster"
	// Sentinel is a master that Redis Sentinels watch: Addrs are the
	// sentinels, and the store follows the master through failovers.
	Sentinel Mode = "sentinel"
)

// Options configure a Store.
type Options struct {
	// Mode is Standalone (the default when empty), Cluster or Sentinel.
	Mode Mode

	// Addrs are "host:port" addresses: the one server (Standalone), seed
	// nodes (Cluster) or the sentinels (Sentinel).
	Addrs []string

	// MasterName is the master the sentinels watch; Sentinel mode only.
	MasterName string

	// Username and Password authenticate with AUTH (ACL user or the
	// default user). Empty means no authentication.
	Username, Password string

	// DB is the database SELECTed on every connection.
	DB int

	// TLS, when not nil, makes every connection use TLS with this config.
	TLS *tls.Config

	// Prefix starts every stored key. Empty means DefaultPrefix. It may not
	// contain '{' or '}', which would move the Redis Cluster hash tag.
	Prefix string

	// Timeout is the budget of one call (a decision, a peek, a release),
	// waiting for a connection included. Zero means DefaultTimeout.
	Timeout time.Duration

	// NoLocalRejects turns off the store's memory of exhausted keys. With
	// it on (the default), a key Redis said cannot admit a request before
	// some time rejects the requests that follow until then without a call
	// (Decision.Local); the package doc says why that is exact.
	NoLocalRejects bool

	// LocalRejectsMax bounds that memory's entries. Zero means 1,000,000.
	LocalRejectsMax int
}

// Store is the Redis store. Create it with New; it is safe for concurrent
// use.
type Store struct {
	prefix  string
	timeout time.Duration
	mode    Mode
	addr    string // the addresses, for errors
	copt    rueidis.ClientOption

	client atomic.Pointer[conn] // nil until connected, and after Close

	// token is the random start of the members this store adds to sliding
	// window logs; seq numbers its decisions.
	token string
	seq   atomic.Uint64

	// offset is added to Redis TIME, in µs. Only tests change it.
	offset atomic.Int64

	batch batcher // decisions of mode d waiting for a call (batch.go)

	// The guards of the nodes (nodes.go): whole for the one server, and
	// on a cluster for the slots of no known node; slots maps the others.
	whole      nodeGuard
	slots      atomic.Pointer[slotMap]
	ranges     []slotRange   // of the last CLUSTER SLOTS; watchSlots's own
	failing    atomic.Int32  // guards that count failures
	remap      chan struct{} // asks watchSlots to map the slots now
	guardClock func() int64  // nil: mono; tests stop it

	local  *exhausted.Table // keys known to be exhausted; nil: off
	slices slicer           // this instance's slices of sliced rules (sliced.go)
	epoch  time.Time        // mono counts from here

	life  context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	mu    sync.Mutex // orders connecting against Close
	dead  bool       // closed, under mu
	cause atomic.Pointer[error]
}

type conn struct{ c rueidis.Client }

var _ limit.Store = (*Store)(nil)

// New returns a store for opts. It fails only when opts are invalid. New
// tries once to connect, for up to Timeout or a second, whichever is
// longer, so that a store whose Redis is up decides from its first call; if
// Redis cannot be reached, New still returns the store, which keeps
// connecting in the background while every call fails at once with an
// error wrapping limit.ErrStoreUnavailable.
func New(opts Options) (*Store, error) {
	if opts.Mode == "" {
		opts.Mode = Standalone
	}
	switch {
	case opts.Mode != Standalone && opts.Mode != Cluster && opts.Mode != Sentinel:
		return nil, fmt.Errorf("redisstore: unknown mode %q (standalone, cluster, sentinel)", opts.Mode)
	case len(opts.Addrs) == 0:
		return nil, errors.New("redisstore: no Redis address")
	case opts.Mode == Standalone && len(opts.Addrs) > 1:
		return nil, fmt.Errorf("redisstore: %d addresses given; a standalone Redis has one", len(opts.Addrs))
	case (opts.Mode == Sentinel) != (opts.MasterName != ""):
		return nil, fmt.Errorf("redisstore: a master name goes with sentinel mode and only with it (mode %s, master name %q)", opts.Mode, opts.MasterName)
	case opts.Mode == Cluster && opts.DB != 0:
		return nil, fmt.Errorf("redisstore: db %d: Redis Cluster has only db 0", opts.DB)
	case strings.ContainsAny(opts.Prefix, "{}"):
		return nil, fmt.Errorf("redisstore: prefix %q contains a brace, which would move the Redis Cluster hash tag", opts.Prefix)
	case opts.Timeout < 0:
		return nil, fmt.Errorf("redisstore: timeout %v is negative", opts.Timeout)
	case opts.DB < 0:
		return nil, fmt.Errorf("redisstore: db %d is negative", opts.DB)
	case opts.LocalRejectsMax < 0:
		return nil, fmt.Errorf("redisstore: local rejects max %d is negative", opts.LocalRejectsMax)
	}
	for _, a := range opts.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("redisstore: address %q: %v", a, err)
		}
	}
	s := &Store{
		prefix:  opts.Prefix,
		timeout: opts.Timeout,
		mode:    opts.Mode,
		addr:    strings.Join(opts.Addrs, ","),
		remap:   make(chan struct{}, 1),
	}
	s.whole.addr = s.addr
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if !opts.NoLocalRejects {
		s.local = exhausted.New(opts.LocalRejectsMax)
	}
	s.epoch = time.Now()
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand)
	s.token = strconv.FormatUint(binary.LittleEndian.Uint64(b[:]), 36) + "."
	s.life, s.stop = context.WithCancel(context.Background())
	s.copt = rueidis.ClientOption{
		InitAddress: append([]string(nil), opts.Addrs...),
		Username:    opts.Username,
		Password:    opts.Password,
		SelectDB:    opts.DB,
		TLSConfig:   opts.TLS,
		Dialer:      net.Dialer{Timeout: max(minConnectTimeout, s.timeout)},
		DialCtxFn:   s.dial,
		// A command whose script may have run is never sent twice: a
		// decision that timed out may have counted, and counting it
		// again would take quota for a request that was answered once.
		DisableRetry: true,
		// Every call goes to Redis; the client-side cache would need
		// CLIENT TRACKING and would never be read.
		DisableCache: true,
		// A standalone server is never asked about a cluster; a cluster
		// client learns the nodes from the seeds.
		ForceSingleClient: opts.Mode == Standalone,
		// Under load, the connection's writer waits this long after each
		// write so that more concurrent calls share the next one: fewer
		// system calls on both sides (docs/bench-log.md: about 30 % less
		// client CPU and 3-9 % less Redis CPU per decision at 64 goroutines).
		// rueidis never delays a call made alone, so the latency of an
		// idle gateway does not change.
		MaxFlushDelay: maxFlushDelay,
	}
	if opts.Mode == Sentinel {
		s.copt.Sentinel = rueidis.SentinelOption{
			MasterSet: opts.MasterName,
			Dialer:    s.copt.Dialer,
			TLSConfig: opts.TLS,
			// The sentinels' +switch-master message moves the store to
			// a new master at once; asking them every few seconds too
			// recovers from a message the store missed.
			TopologyRefreshInterval: sentinelRefresh,
		}
	}
	if opts.Mode == Cluster {
		// rueidis asks the cluster where the slots are after a refused
		// connection or a MOVED, but not after a timeout: without asking
		// every few seconds, a store would keep sending a stalled master's
		// slots to it after a replica took them over.
		s.copt.ClusterOption.ShardsRefreshInterval = slotsRefresh
	}
	connecting := errors.New("connecting")
	s.cause.Store(&connecting)
	if !s.connect() {
		s.wg.Add(1)
		go s.reconnect()
	}
	s.wg.Add(1)
	go s.listen()
	if opts.Mode == Cluster {
		s.wg.Add(1)
		go s.watchSlots()
	}
	return s, nil
}

// mono is the instance's monotonic clock, in ns, which local rejects and
// slices keep their ends on: no wall clock's step or skew moves them.
func (s *Store) mono() int64 { return int64(time.Since(s.epoch)) }

// dial is rueidis's dialer, cut short when the store closes so that Close
// never waits for a connection attempt to a host that does not answer.
func (s *Store) dial(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.life, cancel)()
	if cfg != nil {
		td := tls.Dialer{NetDialer: d, Config: cfg}
		return td.DialContext(ctx, "tcp", dst)
	}
	return d.DialContext(ctx, "tcp", dst)
}

// connect makes one attempt to connect and reports whether the store needs
// no more: it is connected, or closed.
func (s *Store) connect() bool {
	c, err := rueidis.NewClient(s.copt)
	if err == nil && s.mode == Cluster && c.Mode() != rueidis.ClientModeCluster {
		// rueidis falls back to a single server when its one seed is
		// not a cluster node; a store told to share limits across a
		// cluster must not quietly keep them on one server.
		err = fmt.Errorf("%s is not a Redis Cluster node (cluster_enabled is no)", s.addr)
	}
	if err != nil {
		if c != nil {
			c.Close()
		}
		s.cause.Store(&err)
		return s.life.Err() != nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		c.Close()
		return true
	}
	s.client.Store(&conn{c})
	return true
}

func (s *Store) reconnect() {
	defer s.wg.Done()
	backoff := minBackoff
	t := time.NewTimer(backoff)
	defer t.Stop()
	for {
		select {
		case <-s.life.Done():
			return
		case <-t.C:
		}
		if s.connect() {
			return
		}
		backoff = min(2*backoff, maxBackoff)
		// Jitter keeps a fleet of gateways that lost Redis together from
		// reconnecting in lockstep.
		t.Reset(backoff/2 + rand.N(backoff/2))
	}
}

// Close stops the background connection attempts and closes the
// connections. Calls made after Close fail with limit.ErrStoreUnavailable.
func (s *Store) Close() error {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
	if c := s.client.Swap(nil); c != nil {
		c.c.Close()
	}
	return nil
}

var errClosed = errors.New("store is closed")

// get returns the client, or the error every call fails with until the
// store is connected.
func (s *Store) get(op string) (rueidis.Client, error) {
	if c := s.client.Load(); c != nil {
		return c.c, nil
	}
	if s.life.Err() != nil {
		return nil, &unavailableError{op: op, cause: errClosed}
	}
	return nil, &unavailableError{op: op, cause: fmt.Errorf("not connected to %s: %w", s.addr, *s.cause.Load())}
}

// unavailableError is how every failure to get an answer from Redis
// reaches the caller: errors.Is matches both limit.ErrStoreUnavailable, so
// that the caller applies its on_error policy, and the cause.
type unavailableError struct {
	op    string
	cause error
}

func (e *unavailableError) Error() string {
	return "redisstore: " + e.op + ": " + limit.ErrStoreUnavailable.Error() + ": " + e.cause.Error()
}

func (e *unavailableError) Unwrap() []error { return []error{limit.ErrStoreUnavailable, e.cause} }

func unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{op: op, cause: err}
}
