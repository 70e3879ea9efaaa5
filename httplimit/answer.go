package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Answer is a JSON response of SPEC §4.2, which the gateway and the
// middleware make themselves. Its JSON is prepared once: only the request
// id changes from one response to the next.
type Answer struct {
	Status int
	code   string
	prefix []byte // {"code":"...","message":"...","request_id":"
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
	return &Answer{Status: status, code: code, prefix: p}
}

// Write sends the answer. requestID is well formed (WellFormedID), so it
// needs no JSON escaping; extra is appended inside the object as is.
func (a *Answer) Write(w http.ResponseWriter, requestID string, extra string) {
	body := a.Body(requestID, extra)
	SetAnswerHeaders(w.Header(), len(body))
	w.WriteHeader(a.Status)
	w.Write(body)
}

// SetAnswerHeaders sets the fields of an answer whose body, as Body makes
// it, is n bytes long.
func SetAnswerHeaders(h http.Header, n int) {
	h["Content-Type"] = jsonType
	h["Content-Length"] = []string{strconv.Itoa(n)}
	h["Cache-Control"] = noStore
}

// Body is the answer's JSON body, as Write sends it.
func (a *Answer) Body(requestID string, extra string) []byte {
	body := make([]byte, 0, len(a.prefix)+len(requestID)+len(extra)+3)
	body = append(body, a.prefix...)
	body = append(body, requestID...)
	body = append(body, '"')
	body = append(body, extra...)
	return append(body, '}', '\n')
}

var (
	jsonType = []string{"application/json"}
	noStore  = []string{"no-store"}
)
