package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// answer is a response the gateway makes itself (SPEC §4.2). Its JSON is
// prepared once, when the configuration is built: only the request id
// changes from one response to the next.
type answer struct {
	status int
	code   string
	prefix []byte // {"code":"...","message":"...","request_id":"
}

func newAnswer(status int, code, message string) *answer {
	c, _ := json.Marshal(code)
	m, _ := json.Marshal(message)
	p := make([]byte, 0, len(c)+len(m)+40)
	p = append(p, `{"code":`...)
	p = append(p, c...)
	p = append(p, `,"message":`...)
	p = append(p, m...)
	p = append(p, `,"request_id":"`...)
	return &answer{status: status, code: code, prefix: p}
}

// write sends the answer. requestID is well formed (see requestID), so it
// needs no JSON escaping; extra is appended inside the object as is.
func (a *answer) write(w http.ResponseWriter, requestID string, extra string) {
	body := make([]byte, 0, len(a.prefix)+len(requestID)+len(extra)+3)
	body = append(body, a.prefix...)
	body = append(body, requestID...)
	body = append(body, '"')
	body = append(body, extra...)
	body = append(body, '}', '\n')
	h := w.Header()
	h["Content-Type"] = jsonType
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	h["Cache-Control"] = noStore
	w.WriteHeader(a.status)
	w.Write(body)
}

var (
	jsonType = []string{"application/json"}
	noStore  = []string{"no-store"}
)
