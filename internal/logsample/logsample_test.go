package logsample

import "testing"

// Each second lets perSecond events through; the rest are counted until
// TakeDropped reads them.
func TestSampler(t *testing.T) {
	t.Parallel()
	s := New(2)
	got := []bool{s.Allow(10), s.Allow(10), s.Allow(10), s.Allow(10), s.Allow(11), s.Allow(11), s.Allow(11)}
	want := []bool{true, true, false, false, true, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %v, want %v", got, want)
		}
	}
	if n := s.TakeDropped(); n != 3 {
		t.Errorf("%d dropped, want 3", n)
	}
	if n := s.TakeDropped(); n != 0 {
		t.Errorf("%d dropped after they were taken, want 0", n)
	}
}
