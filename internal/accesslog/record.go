package accesslog

import (
	"net/netip"
	"strconv"
	"time"
	"unicode/utf8"
)

// Record is what one line says of a request.
type Record struct {
	Start     time.Time // when the request came
	RequestID string
	Client    netip.Addr // the client's address, as the gateway resolved it
	Method    string
	Protocol  string // the client's: HTTP/1.0, HTTP/1.1 or HTTP/2.0
	Path      string // cut at MaxPath
	Route     string // "": no route took it
	Status    int
	// GRPCStatus is the gRPC call's status; -1 for none, or a request
	// that is no gRPC call.
	GRPCStatus int
	Duration   time.Duration
	Bytes      int64  // of the answer's body; -1: not known
	Outcome    string // what the gateway decided
	Limit      string // the limit that rejected the request; "" none
	// Upstream says the request went upstream, to Target, which took
	// UpstreamDuration to answer with its head or to fail.
	Upstream         bool
	Target           string
	UpstreamDuration time.Duration
	// Error names how the exchange failed; "" when it did not.
	Error string
}

// Write puts r's line on the queue, or drops it when the queue is full:
// it never waits for the writer.
func (a *Log) Write(r *Record) {
	bp := bufs.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, `{"time":"`...)
	b = r.Start.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
	b = append(b, `","level":"INFO","msg":"access","request_id":`...)
	b = appendJSONString(b, r.RequestID)
	b = append(b, `,"client_ip":"`...)
	b = appendAddr(b, r.Client)
	b = append(b, `","method":`...)
	b = appendJSONString(b, r.Method)
	b = append(b, `,"protocol":`...)
	b = appendJSONString(b, r.Protocol)
	b = append(b, `,"path":`...)
	path := r.Path
	if len(path) > MaxPath {
		path = path[:MaxPath]
	}
	b = appendJSONString(b, path)
	if r.Route != "" {
		b = append(b, `,"route":`...)
		b = appendJSONString(b, r.Route)
	}
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	if r.GRPCStatus >= 0 {
		b = append(b, `,"grpc_status":`...)
		b = strconv.AppendInt(b, int64(r.GRPCStatus), 10)
	}
	b = append(b, `,"duration":`...)
	b = strconv.AppendFloat(b, r.Duration.Seconds(), 'f', 6, 64)
	if r.Bytes >= 0 {
		b = append(b, `,"bytes":`...)
		b = strconv.AppendInt(b, r.Bytes, 10)
	}
	b = append(b, `,"outcome":"`...)
	b = append(b, r.Outcome...)
	b = append(b, '"')
	if r.Limit != "" {
		b = append(b, `,"limit":`...)
		b = appendJSONString(b, r.Limit)
	}
	if r.Upstream {
		b = append(b, `,"upstream":`...)
		b = appendJSONString(b, r.Target)
		b = append(b, `,"upstream_duration":`...)
		b = strconv.AppendFloat(b, r.UpstreamDuration.Seconds(), 'f', 6, 64)
	}
	if r.Error != "" {
		b = append(b, `,"error":"`...)
		b = append(b, r.Error...)
		b = append(b, '"')
	}
	b = append(b, "}\n"...)
	*bp = b
	a.put(bp)
}

func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return b
	}
	return a.AppendTo(b)
}

// appendJSONString appends s as a JSON string. Everything in it may come
// from the client: quotes, backslashes and control characters are
// escaped, and bytes that are not UTF-8 become U+FFFD, so that a line
// stays one valid JSON object.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
