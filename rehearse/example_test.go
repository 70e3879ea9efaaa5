package rehearse_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/floodgate-gw/floodgate/rehearse"
)

// A const profile of 500 requests per second sends one every 2 ms.
func ExampleProfile_Schedule() {
	p := rehearse.Profile{Shape: rehearse.Const, Rate: 500, Duration: 2 * time.Second}
	s := p.Schedule()
	n := 0
	for {
		at, ok := s.Next()
		if !ok {
			break
		}
		if n < 3 {
			fmt.Println(at)
		}
		n++
	}
	fmt.Println(n, "requests")
	// Output:
	// 0s
	// 2ms
	// 4ms
	// 1000 requests
}

// A flash sale: 200 requests per second, then 5,000 when the sale opens,
// then about 1,000.
func ExampleProfile_RateAt() {
	p := rehearse.Profile{Shape: rehearse.Surge, From: 200, Rate: 5000, StepAt: 10 * time.Second, Duration: 60 * time.Second}
	for _, t := range []time.Duration{0, 10 * time.Second, 11500 * time.Millisecond} {
		fmt.Printf("%v: %.0f/s\n", t, p.RateAt(t))
	}
	// Output:
	// 0s: 200/s
	// 10s: 5000/s
	// 11.5s: 3000/s
}

// Quantiles are exact at the extremes and within 0.4% in between.
func ExampleHistogram() {
	var h rehearse.Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	fmt.Println(h.Quantile(0.5).Round(time.Millisecond), h.Quantile(0.99).Round(time.Millisecond), h.Max())
	// Output: 500ms 992ms 1s
}

// Past its capacity the mock turns slow, then fails.
func ExampleUpstream_Decide() {
	start := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	u, _ := rehearse.NewUpstream(rehearse.UpstreamConfig{
		Latency: 200 * time.Millisecond, Capacity: 2, OverloadLatency: 3 * time.Second,
	}, start)
	for i := range 4 {
		a := u.Decide(start.Add(time.Duration(i) * time.Millisecond))
		fmt.Println(a.Status, a.Delay, a.Reason)
	}
	s := u.Stats(start.Add(1500 * time.Millisecond))
	fmt.Println(s.Requests, s.Status, s.Rate)
	// Output:
	// 200 200ms ok
	// 200 200ms ok
	// 200 3s slow
	// 503 3s overload
	// 4 map[200:3 503:1] 4
}

func ExampleRun() {
	u, _ := rehearse.NewUpstream(rehearse.UpstreamConfig{}, time.Now())
	srv := httptest.NewServer(u)
	defer srv.Close()

	res, err := rehearse.Run(context.Background(), rehearse.LoadConfig{
		URL:     srv.URL,
		Profile: rehearse.Profile{Shape: rehearse.Const, Rate: 50, Duration: time.Second},
		Users:   10,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(res.Seconds), "second:", res.Total.Sent, "sent,", res.Total.OK, "answered 2xx")
	// Output: 1 second: 50 sent, 50 answered 2xx
}
