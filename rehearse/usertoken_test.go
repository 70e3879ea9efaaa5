package rehearse

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// With UserToken, each request carries its user's token, asked for about
// once per user, never the token of another.
func TestRunUserToken(t *testing.T) {
	t.Parallel()
	var mismatched, requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Header.Get("Authorization") != "Bearer token-of-"+r.Header.Get("X-User-Id") {
			mismatched.Add(1)
		}
	}))
	defer srv.Close()
	var mu sync.Mutex
	asked := map[string]int{}
	_, err := Run(context.Background(), LoadConfig{
		URL:     srv.URL,
		Profile: Profile{Shape: Const, Rate: 200, Duration: time.Second},
		Users:   10,
		UserToken: func(user string) string {
			mu.Lock()
			defer mu.Unlock()
			asked[user]++
			return "token-of-" + user
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if requests.Load() != 200 || mismatched.Load() != 0 {
		t.Errorf("%d requests, %d without their user's token", requests.Load(), mismatched.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range asked {
		total += n
	}
	if len(asked) != 10 || total > 20 {
		t.Errorf("UserToken asked %d times for %d users: %v", total, len(asked), asked)
	}
}
