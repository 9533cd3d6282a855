package poll

import (
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	n := 0
	if !Within(time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Within stopped after %d checks, want 3", n)
	}
	if Within(3*Interval, func() bool { return false }) {
		t.Fatal("Within reported a condition that never held")
	}
}
