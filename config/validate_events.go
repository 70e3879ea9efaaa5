package config

import (
	"cmp"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// The events block, and the answer codes of the responses block.

func (v *validator) events(c *Config) {
	e := &c.Events
	switch e.Sink {
	case SinkNone, SinkFile:
	case SinkRedis, SinkNATS, SinkKafka:
		if e.SpoolDir == "" {
			v.errorAt(v.lineOr("events.spool_dir", "events.sink"), "events.spool_dir", "events.sink %s needs a spool_dir, where events wait while the sink is down", e.Sink)
		}
	default:
		v.errorf("events.sink", "unknown sink %q (none, redis, nats, kafka, file)", e.Sink)
	}
	switch e.Audit {
	case AuditNone:
	case AuditRejected, AuditAll:
		if e.Sink == SinkNone {
			v.errorf("events.audit", "audit %s needs an events sink, but events.sink is none", e.Audit)
		}
	default:
		v.errorf("events.audit", "unknown audit %q (none, rejected, all)", e.Audit)
	}
	if e.Redis.Stream == "" {
		v.errorf("events.redis.stream", "empty")
	}
	if e.Redis.MaxLen <= 0 {
		v.errorf("events.redis.maxlen", "%d must be positive", e.Redis.MaxLen)
	}
	for i, a := range e.Redis.Addrs {
		v.addr(fmt.Sprintf("events.redis.addrs[%d]", i), a, true)
	}
	if e.Sink == SinkRedis && len(e.Redis.Addrs) == 0 && c.Store.Type != StoreRedis {
		v.errorf("events.sink", "the redis sink writes to the store's Redis, but store.type is %s; give events.redis.addrs", c.Store.Type)
	}
	if u, err := url.Parse(e.NATS.URL); err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
		v.errorf("events.nats.url", "%q is not a nats:// or tls:// URL", redactURL(e.NATS.URL))
	}
	if !subjectRE.MatchString(e.NATS.Subject) {
		v.errorf("events.nats.subject", "%q is not a NATS subject without wildcards", e.NATS.Subject)
	}
	v.kafka(e)
	if e.Sink == SinkFile && e.File.Path == "" {
		v.errorf("events.file.path", "the file sink needs a path")
	}
	if e.SpoolMaxBytes <= 0 {
		v.errorf("events.spool_max_bytes", "%d must be positive", e.SpoolMaxBytes)
	}
	if e.MaxBody < 0 {
		v.errorf("events.max_body", "%d is negative (0 keeps no body)", e.MaxBody)
	}
	if e.Sink == SinkKafka && e.MaxBody > MaxKafkaBody {
		// Base64 makes a body 4/3 as long in the event's JSON, and a
		// Kafka record is at most 1 MB by default.
		v.errorf("events.max_body", "%d is more than the kafka sink can carry: at most %d (a record is at most 1 MB)", e.MaxBody, MaxKafkaBody)
	}
	for i, h := range e.Headers {
		if !isToken(h) {
			v.errorf(fmt.Sprintf("events.headers[%d]", i), "%q is not a valid header name", h)
		}
	}
}

// MaxKafkaBody bounds events.max_body with the kafka sink: a body of that
// size, in base64, leaves a 1 MB record room for the rest of the event.
const MaxKafkaBody = 512 << 10

// kafka checks events.kafka: broker addresses, a topic name Kafka takes,
// the acks, compression, TLS files and SASL it names. The brokers are
// required only when kafka is the sink; the rest is checked whichever
// sink is chosen, as for redis and nats.
func (v *validator) kafka(e *Events) {
	const p = "events.kafka"
	k := &e.Kafka
	if e.Sink == SinkKafka && len(k.Brokers) == 0 {
		v.errorAt(v.lineOr(p+".brokers", "events.sink"), p+".brokers", "the kafka sink needs at least one broker HOST:PORT")
	}
	for i, a := range k.Brokers {
		v.addr(fmt.Sprintf("%s.brokers[%d]", p, i), a, true)
	}
	if !kafkaTopicRE.MatchString(k.Topic) || k.Topic == "." || k.Topic == ".." {
		v.errorf(p+".topic", "%q is not a Kafka topic name (1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-')", k.Topic)
	}
	if k.ClientID == "" {
		v.errorf(p+".client_id", "empty: leave it out for floodgate")
	}
	switch k.Acks {
	case "all", "leader":
	case "none", "0":
		v.errorf(p+".acks", "%q would count an event delivered before any broker stored it; all or leader", k.Acks)
	default:
		v.errorf(p+".acks", "%q: all or leader", k.Acks)
	}
	switch k.Compression {
	case "none", "gzip", "snappy", "lz4", "zstd":
	default:
		v.errorf(p+".compression", "%q: none, gzip, snappy, lz4 or zstd", k.Compression)
	}
	if t := k.TLS; t != nil {
		const tp = p + ".tls"
		if t.CA == "" && v.has(tp+".ca") {
			v.errorf(tp+".ca", "empty: leave it out to verify the brokers by the system's roots")
		}
		if t.ServerName == "" && v.has(tp+".server_name") {
			v.errorf(tp+".server_name", "empty: leave it out to verify the host of each broker")
		}
		v.halfPair(tp, t.Cert, t.Key)
		v.certPool(tp+".ca", t.CA)
		v.keyPair(tp, t.Cert, t.Key, "the brokers will refuse it")
	}
	if s := k.SASL; s != nil {
		const sp = p + ".sasl"
		switch s.Mechanism {
		case "plain", "scram-sha-256", "scram-sha-512":
		case "":
			v.errorAt(v.lineOr(sp+".mechanism", sp), sp+".mechanism", "missing: plain, scram-sha-256 or scram-sha-512")
		default:
			v.errorf(sp+".mechanism", "%q: plain, scram-sha-256 or scram-sha-512", s.Mechanism)
		}
		if s.Username == "" {
			v.errorAt(v.lineOr(sp+".username", sp), sp+".username", "missing: the SASL user")
		}
		if s.PasswordEnv == "" {
			v.errorAt(v.lineOr(sp+".password_env", sp), sp+".password_env", "missing: the environment variable that holds the password")
		} else if val, ok := v.env(sp+".password_env", s.PasswordEnv); ok {
			s.Password = val
		}
	}
}

// kafkaTopicRE is Kafka's legal topic name (kafka.common.Topic).
var kafkaTopicRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// redactURL hides the password of a URL as "***": error messages and
// Redacted must not print it.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return redactedURL(u)
	}
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		return "***" + s[i:]
	}
	return s
}

func redactedURL(u *url.URL) string {
	if _, has := u.User.Password(); !has {
		return u.String()
	}
	// url.UserPassword would escape the stars, so insert them by hand
	// after the user name.
	r := *u
	r.User = url.User(u.User.Username())
	s := r.String()
	prefix := u.Scheme + "://" + r.User.String()
	if strings.HasPrefix(s, prefix+"@") {
		return prefix + ":***" + s[len(prefix):]
	}
	return u.Redacted()
}

// codes checks that each code has one message wherever it is given, and
// resolves the message of every code the gateway may answer with.
func (v *validator) codes(c *Config) {
	type use struct {
		path, code, msg string
		line            int
		def             string // the built-in code whose text fills in
	}
	var uses []use
	for code, msg := range c.Responses {
		p := "responses." + code
		if !codeRE.MatchString(code) {
			v.errorf(p, "%q: a code is made of a-z, 0-9 and _", code)
		}
		if msg == "" {
			v.errorf(p, "empty message")
		}
		uses = append(uses, use{p, code, msg, v.line(p), ""})
	}
	rejects := func(ls []*Limit, p string) {
		for i, l := range ls {
			rp := fmt.Sprintf("%s[%d].reject", p, i)
			line := v.line(rp + ".message")
			if !v.has(rp + ".message") {
				line = v.line(rp + ".code")
			}
			uses = append(uses, use{rp + ".message", l.Reject.Code, l.Reject.Message, line, CodeRateLimited})
		}
	}
	rejects(c.GlobalLimits, "global_limits")
	for i, r := range c.Routes {
		rp := fmt.Sprintf("routes[%d]", i)
		rejects(r.Limits, rp+".limits")
		fp := rp + ".fallback"
		line := v.line(fp + ".message")
		if !v.has(fp + ".message") {
			line = v.line(fp + ".code")
		}
		uses = append(uses, use{fp + ".message", r.Fallback.Code, r.Fallback.Message, line, CodeServiceUnavailable})
		if r.Protect != nil {
			pp := rp + ".protect.reject"
			line := v.line(pp + ".message")
			if !v.has(pp + ".message") {
				line = v.line(pp + ".code")
			}
			uses = append(uses, use{pp + ".message", r.Protect.Reject.Code, r.Protect.Reject.Message, line, CodeOverloaded})
		}
	}
	slices.SortStableFunc(uses, func(a, b use) int { return cmp.Compare(a.line, b.line) })

	v.messages = map[string]string{}
	first := map[string]use{}
	for _, u := range uses {
		if u.msg == "" {
			continue
		}
		if f, ok := first[u.code]; ok {
			if f.msg != u.msg {
				v.errorAt(u.line, u.path, "code %s has two messages: %q here and %q at line %d (a code means one message everywhere)", u.code, u.msg, f.msg, f.line)
			}
			continue
		}
		first[u.code] = u
		v.messages[u.code] = u.msg
	}
	for code, msg := range builtinMessages {
		if _, ok := v.messages[code]; !ok {
			v.messages[code] = msg
		}
	}
	for _, u := range uses {
		if _, ok := v.messages[u.code]; !ok && u.def != "" {
			v.messages[u.code] = builtinMessages[u.def]
		}
	}
}
