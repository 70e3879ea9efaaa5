package accesslog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// blockedWriter holds every Write until it is released.
type blockedWriter struct {
	release chan struct{}
	mu      sync.Mutex
	lines   int
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	w.lines += bytes.Count(p, []byte("\n"))
	w.mu.Unlock()
	return len(p), nil
}

// A writer that cannot keep up costs lines, counted, not the requests'
// time: put never waits.
func TestAccessLogQueueFull(t *testing.T) {
	t.Parallel()
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})
	a := New(dropped, slog.New(slog.DiscardHandler), time.Now)
	w := &blockedWriter{release: make(chan struct{})}
	a.Use(&Sink{target: "test", w: w})
	const n = queueLen + 100
	for range n {
		b := bufs.Get().(*[]byte)
		*b = append((*b)[:0], "{}\n"...)
		a.put(b)
	}
	close(w.release)
	a.Close()
	lost := a.TakeDropped()
	if lost < 99 || lost > 100 {
		t.Errorf("%d lines dropped, want 99 or 100 (the writer holds one)", lost)
	}
	if got := testutil.ToFloat64(dropped); got != float64(lost) {
		t.Errorf("the metric counts %v, want %d", got, lost)
	}
	if int64(w.lines)+lost != n {
		t.Errorf("%d lines written and %d dropped of %d", w.lines, lost, n)
	}
}

func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", `q"uote\back`, "new\nline\ttab\x00nul\x7f", "ünï©ødé", "bad\xff\xfeutf8", "\u2028"} {
		b := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("%q gives %s, not a JSON string: %v", s, b, err)
			continue
		}
		if want := strings.ToValidUTF8(s, "\ufffd"); got != want && !strings.Contains(s, "\xff") {
			t.Errorf("%q gives %s, read back as %q", s, b, got)
		}
		if bytes.ContainsAny(b, "\n\r\x00") {
			t.Errorf("%q gives %q, with a raw control character", s, b)
		}
	}
}
