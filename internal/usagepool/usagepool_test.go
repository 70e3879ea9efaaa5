package usagepool

import (
	"errors"
	"slices"
	"sync"
	"testing"
)

type value struct{ name string }

// destroyed records what a pool destroyed, in order.
type destroyed struct {
	mu  sync.Mutex
	got []string
}

func (d *destroyed) destroy(key string, v *value, replaced bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := key + "=" + v.name
	if replaced {
		s += " (replaced)"
	}
	d.got = append(d.got, s)
}

func (d *destroyed) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	got := d.got
	d.got = nil
	return got
}

func maker(name string) func(*value, bool) (*value, error) {
	return func(*value, bool) (*value, error) { return &value{name}, nil }
}

func hold(t *testing.T, p *Pool[*value], l *Lease, key string, keep func(*value) bool, make func(*value, bool) (*value, error)) *value {
	t.Helper()
	v, err := p.Hold(l, key, keep, make)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A reload's lease takes what the running one holds; what only the
// running one held goes when it lets go, and nothing before.
func TestReloadKeepsWhatIsShared(t *testing.T) {
	t.Parallel()
	var d destroyed
	p := New(d.destroy)
	old := new(Lease)
	a := hold(t, p, old, "a", nil, maker("a1"))
	hold(t, p, old, "b", nil, maker("b1"))

	next := new(Lease)
	if got := hold(t, p, next, "a", nil, maker("a2")); got != a {
		t.Errorf("the new lease got %v, want the kept %v", got, a)
	}
	hold(t, p, next, "c", nil, maker("c1"))
	if got := d.take(); len(got) != 0 {
		t.Fatalf("destroyed %v while both leases hold", got)
	}
	old.Release()
	if got := d.take(); !slices.Equal(got, []string{"b=b1"}) {
		t.Errorf("destroyed %v, want b=b1 alone", got)
	}
	old.Release() // a second release does nothing
	if p.Len() != 2 {
		t.Errorf("%d keys kept, want a and c", p.Len())
	}
	next.Release()
	got := d.take()
	slices.Sort(got)
	if !slices.Equal(got, []string{"a=a1", "c=c1"}) {
		t.Errorf("destroyed %v, want a=a1 and c=c1", got)
	}
	if p.Len() != 0 {
		t.Errorf("%d keys kept after every lease let go", p.Len())
	}
}

// A value keep refuses is replaced under its key; the one replaced stays
// with the leases that hold it, and make sees it to carry its state over.
func TestReplace(t *testing.T) {
	t.Parallel()
	var d destroyed
	p := New(d.destroy)
	old, next := new(Lease), new(Lease)
	v1 := hold(t, p, old, "k", nil, maker("v1"))
	var seen *value
	v2 := hold(t, p, next, "k", func(v *value) bool { return v.name == "v2" }, func(prev *value, had bool) (*value, error) {
		if had {
			seen = prev
		}
		return &value{"v2"}, nil
	})
	if seen != v1 || v2 == v1 {
		t.Fatalf("make saw %v and made %v; want it to see %v and make another", seen, v2, v1)
	}
	old.Release()
	if got := d.take(); !slices.Equal(got, []string{"k=v1 (replaced)"}) {
		t.Errorf("destroyed %v, want the replaced v1", got)
	}
	third := new(Lease)
	if got := hold(t, p, third, "k", func(v *value) bool { return v.name == "v2" }, maker("v3")); got != v2 {
		t.Errorf("got %v, want the kept v2", got)
	}
	next.Release()
	third.Release()
	if got := d.take(); !slices.Equal(got, []string{"k=v2"}) {
		t.Errorf("destroyed %v, want k=v2", got)
	}
}

// A build that fails lets go of what it made: a value it replaced, still
// held by the running configuration, is the key's again.
func TestFailedBuildGivesBack(t *testing.T) {
	t.Parallel()
	var d destroyed
	p := New(d.destroy)
	running, failed := new(Lease), new(Lease)
	v1 := hold(t, p, running, "k", nil, maker("v1"))
	hold(t, p, failed, "k", func(*value) bool { return false }, maker("v2"))
	if _, err := p.Hold(failed, "x", nil, func(*value, bool) (*value, error) { return nil, errors.New("no") }); err == nil {
		t.Fatal("a make that failed gave no error")
	}
	failed.Release()
	if got := d.take(); !slices.Equal(got, []string{"k=v2 (replaced)"}) {
		t.Errorf("destroyed %v, want the failed build's v2", got)
	}
	again := new(Lease)
	if got := hold(t, p, again, "k", nil, maker("v3")); got != v1 {
		t.Errorf("after the failed build, got %v, want the running %v", got, v1)
	}
	if p.Len() != 1 {
		t.Errorf("%d keys kept, want k alone (x failed)", p.Len())
	}
}

// A hold after its lease was released lets go at once.
func TestHoldAfterRelease(t *testing.T) {
	t.Parallel()
	var d destroyed
	p := New(d.destroy)
	l := new(Lease)
	l.Release()
	hold(t, p, l, "k", nil, maker("v"))
	if got := d.take(); !slices.Equal(got, []string{"k=v"}) {
		t.Errorf("destroyed %v, want k=v", got)
	}
}

// Leases taken and released from many goroutines keep the count: a value
// goes exactly once, after the last holder.
func TestConcurrentLeases(t *testing.T) {
	t.Parallel()
	var d destroyed
	p := New(d.destroy)
	base := new(Lease)
	hold(t, p, base, "k", nil, maker("v"))
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 100 {
				l := new(Lease)
				if _, err := p.Hold(l, "k", nil, maker("other")); err != nil {
					t.Error(err)
				}
				l.Release()
			}
		})
	}
	wg.Wait()
	if got := d.take(); len(got) != 0 {
		t.Fatalf("destroyed %v while the base lease holds", got)
	}
	base.Release()
	if got := d.take(); !slices.Equal(got, []string{"k=v"}) {
		t.Errorf("destroyed %v, want k=v once", got)
	}
}

// A kept pool keeps a value no lease holds, for the next one to take up,
// until Forget; Forget of a value still held lets it go with its last
// lease.
func TestKept(t *testing.T) {
	t.Parallel()
	var d destroyed
	p := NewKept(d.destroy)
	a := new(Lease)
	v := hold(t, p, a, "k", nil, maker("v1"))
	a.Release()
	if got := d.take(); len(got) != 0 || p.Len() != 1 {
		t.Fatalf("destroyed %v, %d kept; want v1 kept", got, p.Len())
	}
	b := new(Lease)
	if got := hold(t, p, b, "k", nil, maker("v2")); got != v {
		t.Errorf("got %v, want the kept %v", got, v)
	}
	p.Forget("k")
	if got := d.take(); len(got) != 0 {
		t.Fatalf("Forget of a held value destroyed %v at once", got)
	}
	b.Release()
	if got := d.take(); !slices.Equal(got, []string{"k=v1"}) || p.Len() != 0 {
		t.Errorf("destroyed %v, %d kept; want v1 gone with its last lease", got, p.Len())
	}
	c := new(Lease)
	hold(t, p, c, "j", nil, maker("w"))
	c.Release()
	p.Forget("j")
	if got := d.take(); !slices.Equal(got, []string{"j=w"}) {
		t.Errorf("Forget of a value no lease holds: destroyed %v, want j=w", got)
	}
	// Held again after Forget, it is kept again.
	e := new(Lease)
	hold(t, p, e, "k", nil, maker("x"))
	p.Forget("k")
	hold(t, p, e, "k", nil, maker("y"))
	e.Release()
	if got := d.take(); len(got) != 0 {
		t.Errorf("a value held again after Forget went with its lease: %v", got)
	}
}
