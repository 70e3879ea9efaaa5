package ruledata_test

import (
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/ruledata"
	"github.com/floodgate-gw/floodgate/limit"
)

// Two owners asking in turn each build their value once; a fifth owner
// drops the oldest; racing first asks all get one value.
func TestExt(t *testing.T) {
	r := &limit.Rule{Name: "x", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Second}}
	builds := map[string]int{}
	ext := func(owner string) any {
		return ruledata.Ext(r, owner, func(*limit.Rule) any { builds[owner]++; return owner + "-value" })
	}
	for range 3 {
		if ext("a") != "a-value" || ext("b") != "b-value" {
			t.Fatal("wrong value")
		}
	}
	if builds["a"] != 1 || builds["b"] != 1 {
		t.Fatalf("builds %v, want each owner's value built once", builds)
	}
	for _, o := range []string{"c", "d", "e"} {
		ext(o)
	}
	ext("a") // the oldest, dropped by e
	ext("e")
	if builds["a"] != 2 || builds["e"] != 1 {
		t.Fatalf("builds %v, want a rebuilt once after four more owners, e kept", builds)
	}

	r2 := &limit.Rule{Name: "y", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Second}}
	var wg sync.WaitGroup
	got := make([]any, 16)
	for i := range got {
		wg.Go(func() { got[i] = ruledata.Ext(r2, "o", func(*limit.Rule) any { return new(int) }) })
	}
	wg.Wait()
	for _, v := range got {
		if v != got[0] {
			t.Fatal("racing first asks got different values")
		}
	}
}
