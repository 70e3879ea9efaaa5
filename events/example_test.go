package events_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/floodgate-gw/floodgate/events"
)

// A gateway records a request its open breaker turned away: the body is
// captured up to max_body, the configured headers are kept, and the
// fallback says "recorded": true only if Record returned true.
func ExampleRecorder_Record() {
	dir, _ := os.MkdirTemp("", "events-example")
	defer os.RemoveAll(dir)
	sink := events.Sink{
		Kind:          events.SinkFile,
		File:          events.FileSink{Path: filepath.Join(dir, "events.jsonl")},
		SpoolMaxBytes: 1 << 20,
	}
	const maxBody = 16
	keep := []string{"Content-Type", "X-User-Id"}
	rec, err := events.NewRecorder(sink, events.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rec.Close()

	req, _ := http.NewRequest("POST", "http://gw/api/orders?id=7", strings.NewReader(`{"item":"lucky-meal","n":1}`))
	req.Header.Set("X-User-Id", "u42")
	req.Header.Set("Cookie", "session=secret")
	body, truncated, rest := events.CaptureBody(req.Body, maxBody)
	req.Body = io.NopCloser(rest) // the whole body, for the upstream when the request goes on

	e := &events.Event{
		Type:      events.TypeBreakerRejected,
		Route:     "orders",
		Method:    req.Method,
		Path:      req.URL.EscapedPath(),
		Query:     req.URL.RawQuery,
		Headers:   events.KeepHeaders(req.Header, keep),
		Body:      body,
		Truncated: truncated,
	}
	fmt.Println("recorded:", rec.Record(context.Background(), e))
	fmt.Printf("kept %q, truncated %v, headers %v\n", e.Body, e.Truncated, e.Headers)
	// Output:
	// recorded: true
	// kept "{\"item\":\"lucky-m", truncated true, headers map[X-User-Id:[u42]]
}

// Replay reads back one route's breaker_rejected events and marks each
// done once handled; "floodgate events replay" is built on it.
func ExampleOpenSource() {
	dir, _ := os.MkdirTemp("", "events-example")
	defer os.RemoveAll(dir)
	cfg := events.Sink{Kind: events.SinkFile, File: events.FileSink{Path: filepath.Join(dir, "events.jsonl")}}
	rec, _ := events.NewRecorder(cfg, events.Options{})
	for i := range 3 {
		rec.Record(context.Background(), &events.Event{
			Type: events.TypeBreakerRejected, Route: "orders", Method: "POST", Path: fmt.Sprintf("/api/orders/%d", i),
		})
	}
	rec.Close()

	ctx := context.Background()
	src, err := events.OpenSource(ctx, cfg, "orders", events.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer src.Close()
	for {
		e, err := src.Next(ctx)
		if err != nil { // io.EOF: all done
			break
		}
		fmt.Println(e.Method, e.Path) // send it upstream here
		src.Done(ctx, e)
	}
	// Output:
	// POST /api/orders/0
	// POST /api/orders/1
	// POST /api/orders/2
}
