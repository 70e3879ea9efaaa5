package config

import (
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

// The codes of the responses the gateway makes itself (docs/configuration.md, responses).
const (
	CodeRateLimited         = "rate_limited"
	CodeServiceUnavailable  = "service_unavailable"
	CodeUpstreamTimeout     = "upstream_timeout"
	CodeUpstreamUnavailable = "upstream_unavailable"
	CodeRouteNotFound       = "route_not_found"
	CodeBadRequest          = "bad_request"
	CodeBodyTooLarge        = "body_too_large"
	CodeHeadersTooLarge     = "headers_too_large"
	CodeKeyRequired         = "key_required"
	CodeLimiterUnavailable  = "limiter_unavailable"
	CodeRequestTimeout      = "request_timeout"
	CodeOverloaded          = "overloaded"
)

// builtinMessages are the texts of the gateway's own codes when neither a
// reject, a fallback nor responses gives one.
var builtinMessages = map[string]string{
	CodeRateLimited:         "Too many requests, try again later",
	CodeServiceUnavailable:  "The service is temporarily unavailable, try again later",
	CodeUpstreamTimeout:     "The upstream service did not answer in time",
	CodeUpstreamUnavailable: "The upstream service is unavailable",
	CodeRouteNotFound:       "No route matches this request",
	CodeBadRequest:          "The request is malformed",
	CodeBodyTooLarge:        "The request body is too large",
	CodeHeadersTooLarge:     "The request headers are too large",
	CodeKeyRequired:         "The request lacks the value this route is limited by",
	CodeLimiterUnavailable:  "The rate limiter is unavailable, try again later",
	CodeRequestTimeout:      "The request body arrived too slowly",
	CodeOverloaded:          "The service is at its capacity, try again shortly",
}

// The defaults are set before decoding, so a value the file gives, even a
// zero, replaces them: an explicit "timeout: 0s" is then refused by
// validation instead of quietly becoming the default.

// Defaults returns a Config holding the defaults docs/configuration.md lists, as an empty
// file would give them (without routes, so it would not validate).
func Defaults() *Config { return defaultConfig() }

func defaultConfig() *Config {
	return &Config{
		Server: Server{
			Listen:          ":8080",
			IPv6Prefix:      64,
			ShutdownTimeout: 10 * time.Second,
			RequestIDHeader: "X-Request-Id",
			MaxHeaderBytes:  65536,
			BodyTimeout:     60 * time.Second,
			SendTimeout:     60 * time.Second,
			AccessLog:       AccessLogOff,
			TLS:             ServerTLS{MinVersion: TLS12, ClientAuth: ClientAuthNone},
			HTTP2: HTTP2{
				MaxConcurrentStreams: 100,
				MaxReadFrameSize:     1 << 20,
				InitialStreamWindow:  1 << 20,
				InitialConnWindow:    1 << 20,
			},
		},
		Admin: Admin{Listen: "127.0.0.1:9090"},
		Store: Store{
			Type: StoreMemory,
			Redis: Redis{
				Mode:    RedisStandalone,
				Prefix:  "fg:",
				Timeout: 50 * time.Millisecond,
			},
			Memory:          Memory{MaxKeys: 1_000_000},
			OnError:         OnErrorLocal,
			LocalRejects:    true,
			LocalRejectsMax: 1_000_000,
		},
		Events: Events{
			Sink:          SinkNone,
			Redis:         EventsRedis{Stream: "fg:events", MaxLen: 1_000_000},
			NATS:          EventsNATS{URL: "nats://127.0.0.1:4222", Subject: "floodgate.events"},
			Kafka:         EventsKafka{Topic: "floodgate-events", ClientID: "floodgate", Acks: "all", Compression: "none"},
			File:          EventsFile{Path: "floodgate-events.jsonl"},
			SpoolMaxBytes: 1 << 30,
			Audit:         AuditNone,
			MaxBody:       65536,
			Headers:       []string{"Content-Type", "X-User-Id", "Authorization"},
		},
		Tracing: Tracing{Sample: defaultTraceSample},
	}
}

// setDefaults is called by the decoder on every new element of a list
// before the element's own keys are decoded.
func (r *Route) setDefaults() {
	r.Upstream = Upstream{
		ConnectTimeout: 2 * time.Second,
		Timeout:        3 * time.Second,
		IdleTimeout:    60 * time.Second,
		Balance:        BalanceRoundRobin,
		Health:         Health{Timeout: time.Second, HealthyAfter: 2, UnhealthyAfter: 3},
		Eject:          Eject{ConsecutiveFailures: 5, BaseTime: 5 * time.Second, MaxTime: 60 * time.Second},
		Protocol:       ProtocolHTTP1,
	}
	r.Breaker = Breaker{
		Window:          10 * time.Second,
		MinCalls:        20,
		FailureRate:     0.5,
		SlowCallRate:    1.0,
		FailureStatuses: []int{500, 502, 503, 504},
		OpenFor:         30 * time.Second,
		HalfOpenCalls:   10,
		Scope:           BreakerInstance,
	}
	r.Fallback = Fallback{Status: 503, Code: CodeServiceUnavailable}
}

func (p *Protect) setDefaults() {
	p.Min = 1
	p.Tolerance = 2
	p.WarmUp = 5 * time.Second
	p.Throttling = true
	p.Reject = Reject{Status: 503, Code: CodeOverloaded}
}

func (p *Priority) setDefaults() {
	p.MaxWait = 250 * time.Millisecond
}

func (l *Limit) setDefaults() {
	l.OnMissing = OnMissingDeny
	l.Algorithm = limit.FixedWindow
	l.Align = limit.AlignEpoch
	l.Headers = true
	l.Sync = SyncExact
	l.Cost = 1
	l.Reject = Reject{Status: 429, Code: CodeRateLimited}
}
