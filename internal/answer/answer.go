package answer

import (
	"encoding/json"
	"net/http"
	"sync"
)

// Answer is a JSON response {"code", "message", "request_id"}, which the
// gateway and the middleware make themselves. Its JSON is prepared once:
// only the request id changes from one response to the next.
type Answer struct {
	Status int
	code   string
	prefix []byte // {"code":"...","message":"...","request_id":"

	// What a gRPC request is answered with (WriteGRPC): the status's
	// number, and the message percent-encoded; nil for no message.
	grpcCode    GRPCCode
	grpcStatus  []string
	grpcMessage []string
}

// NewAnswer prepares the answer with status, code and message.
func NewAnswer(status int, code, message string) *Answer {
	c, _ := json.Marshal(code)
	m, _ := json.Marshal(message)
	p := make([]byte, 0, len(c)+len(m)+40)
	p = append(p, `{"code":`...)
	p = append(p, c...)
	p = append(p, `,"message":`...)
	p = append(p, m...)
	p = append(p, `,"request_id":"`...)
	a := &Answer{Status: status, code: code, prefix: p}
	a.WithGRPC(GRPCCodeOf(status))
	if message != "" {
		a.grpcMessage = []string{EncodeGRPCMessage(message)}
	}
	return a
}

// Write sends the answer. requestID is well formed (WellFormedID), so it
// needs no JSON escaping; extra is appended inside the object as is.
//
// The body is put together in a buffer that is used again once Write
// returns (an io.Writer keeps nothing of what it is given), and the
// header values are shared ones: an answer costs no allocation of its
// own while its length is below 4 KiB.
func (a *Answer) Write(w http.ResponseWriter, requestID string, extra string) {
	n := a.bodyLen(requestID, extra)
	SetAnswerHeaders(w.Header(), n)
	w.WriteHeader(a.Status)
	bp := bodies.Get().(*[]byte)
	body := a.appendBody((*bp)[:0], requestID, extra)
	w.Write(body)
	if cap(body) <= maxPooledBody {
		*bp = body[:0]
		bodies.Put(bp)
	}
}

// SetAnswerHeaders sets the fields of an answer whose body, as Body makes
// it, is n bytes long.
func SetAnswerHeaders(h http.Header, n int) {
	h["Content-Type"] = jsonType
	h["Content-Length"] = intValue(int64(n))
	h["Cache-Control"] = noStore
}

// Body is the answer's JSON body, as Write sends it.
func (a *Answer) Body(requestID string, extra string) []byte {
	return a.appendBody(make([]byte, 0, a.bodyLen(requestID, extra)), requestID, extra)
}

func (a *Answer) bodyLen(requestID, extra string) int {
	return len(a.prefix) + len(requestID) + len(extra) + 3
}

func (a *Answer) appendBody(body []byte, requestID, extra string) []byte {
	body = append(body, a.prefix...)
	body = append(body, requestID...)
	body = append(body, '"')
	body = append(body, extra...)
	return append(body, '}', '\n')
}

// bodies are the buffers Write puts bodies together in; one that grew
// past maxPooledBody (a long message) is left to the collector.
var bodies = sync.Pool{New: func() any {
	b := make([]byte, 0, 512)
	return &b
}}

const maxPooledBody = 4 << 10

var (
	jsonType = []string{"application/json"}
	noStore  = []string{"no-store"}
)
