package redisstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// TestCallCtx: a callCtx ends as context.WithDeadline's would, at its
// deadline or its parent's end, whether Done is asked before or after, and
// one put back and taken again starts anew.
func TestCallCtx(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		c := withTimeout(context.Background(), 20*time.Millisecond)
		defer c.release()
		if err := c.Err(); err != nil {
			t.Fatalf("Err %v before the deadline", err)
		}
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed at the deadline")
		}
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err %v, want DeadlineExceeded", err)
		}
	})
	t.Run("deadline_unasked", func(t *testing.T) {
		c := withTimeout(context.Background(), time.Millisecond)
		defer c.release()
		time.Sleep(5 * time.Millisecond)
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err %v, want DeadlineExceeded", err)
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("Done open past the deadline")
		}
	})
	t.Run("parent", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.WithValue(context.Background(), owner{}, "v"))
		c := withTimeout(parent, time.Hour)
		defer c.release()
		if c.Value(owner{}) != "v" {
			t.Fatal("parent's value lost")
		}
		done := c.Done()
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed when the parent ended")
		}
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err %v, want Canceled", err)
		}
	})
	t.Run("parent_deadline", func(t *testing.T) {
		parent, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pd, _ := parent.Deadline()
		c := withTimeout(parent, time.Hour)
		defer c.release()
		if d, ok := c.Deadline(); !ok || !d.Equal(pd) {
			t.Fatalf("deadline %v, want the parent's %v", d, pd)
		}
	})
	t.Run("parent_deadline_first", func(t *testing.T) {
		// The parent ends the call by itself: nothing of the callCtx's
		// own is armed, and it ends with the parent.
		parent, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		c := withTimeout(parent, time.Hour)
		defer c.release()
		if c.Done() != parent.Done() {
			t.Fatal("Done is not the parent's")
		}
		if c.armed || c.stop != nil {
			t.Fatal("a timer or a link armed for a parent that ends first")
		}
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed at the parent's deadline")
		}
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err %v, want DeadlineExceeded", err)
		}
	})
	t.Run("parent_deadline_first_past", func(t *testing.T) {
		// Past the parent's deadline, before its timer has run: Err says
		// so by the clock, as rueidis refuses a call on Err alone.
		p := &laggingParent{Context: context.Background(), dl: time.Now().Add(-time.Millisecond), done: make(chan struct{})}
		c := withTimeout(p, time.Hour)
		defer c.release()
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err %v past the parent's deadline, want DeadlineExceeded", err)
		}
	})
	t.Run("reused", func(t *testing.T) {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 1000 {
					c := withTimeout(context.Background(), time.Minute)
					if c.Err() != nil {
						t.Error("a reused callCtx has ended")
					}
					select {
					case <-c.Done():
						t.Error("a reused callCtx's Done is closed")
					default:
					}
					c.release()
				}
			})
		}
		wg.Wait()
	})
}

// laggingParent is a parent between its deadline and its timer's run:
// the deadline has passed, Done is open and Err is nil, as any context of
// context.WithDeadline is for a moment.
type laggingParent struct {
	context.Context
	dl   time.Time
	done chan struct{}
}

func (p *laggingParent) Deadline() (time.Time, bool) { return p.dl, true }
func (p *laggingParent) Done() <-chan struct{}       { return p.done }
func (p *laggingParent) Err() error                  { return nil }

// A call whose caller's deadline has passed, the caller's timer not yet
// run, is refused before it is sent: rueidis reads Err, and a command sent
// all the same would count in Redis for a caller gone (or, on a
// connection in sync mode, be written past its deadline and close it).
func TestCallPastParentDeadlineNotSent(t *testing.T) {
	s := open(t, testredis.Start(t), remoteOnly)
	c := client(t, s)
	bg := context.Background()
	if err := c.Do(bg, c.B().Set().Key("n").Value("0").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	p := &laggingParent{Context: bg, dl: time.Now().Add(-time.Millisecond), done: make(chan struct{})}
	cctx := withTimeout(p, s.timeout)
	err := c.Do(cctx, c.B().Incr().Key("n").Build()).Error()
	cctx.discard()
	n, err2 := c.Do(bg, c.B().Get().Key("n").Build()).AsInt64()
	if err2 != nil {
		t.Fatal(err2)
	}
	if n != 0 {
		t.Errorf("a call past its caller's deadline ran in Redis (counter %d, err %v)", n, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want context.DeadlineExceeded", err)
	}
}
