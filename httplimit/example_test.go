package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-gw/floodgate/httplimit"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// A service limits each user to 2 requests a minute and itself to 1,000;
// the limits are decided together, and the third request of a user gets
// the JSON answer and headers the gateway gives.
func ExampleNew() {
	user := &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 2, Period: time.Minute}}
	all := &limit.Rule{Name: "all", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1000, Period: time.Minute}}
	byUser := func(r *http.Request) (string, bool) {
		id := r.Header.Get("X-User-Id")
		return id, id != "" // no id: 403 key_required, unless KeyOptional
	}
	limited, err := httplimit.New(httplimit.Options{
		Store: memory.New(memory.Options{}), // or a *redisstore.Store (redisstore.New) across instances
		Limits: []httplimit.Limit{
			{Rule: all},
			{Rule: user, Key: byUser, Code: "repeat_apply", Message: "You have already taken part"},
		},
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(limited(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "coupon\n")
	})))
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest("POST", srv.URL, nil)
		req.Header.Set("X-User-Id", "u1")
		req.Header.Set("X-Request-Id", "req-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Print(resp.StatusCode, " ", resp.Header.Get("X-RateLimit-Remaining"), " ", string(body))
	}
	// Output:
	// 200 1 coupon
	// 200 0 coupon
	// 429 0 {"code":"repeat_apply","message":"You have already taken part","request_id":"req-1"}
}
