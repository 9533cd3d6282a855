package invalid_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/unkeyed/ratelimit/internal/invalid"
)

func ExampleInEntry() {
	err := invalid.InEntry("limits", 2, &invalid.Error{Field: "cost", Rule: "must be between 0 and 1000000"})
	fmt.Println(err)
	// Output: limits[2].cost: must be between 0 and 1000000
}

// TestAs: the error is found through wrapping; another error is not one,
// and InEntry leaves it as it is.
func TestAs(t *testing.T) {
	wrapped := fmt.Errorf("set override: %w", &invalid.Error{Field: "limit", Rule: "must be at least 1"})
	if e, ok := invalid.As(wrapped); !ok || e.Field != "limit" {
		t.Fatalf("As(%v) = %v, %v", wrapped, e, ok)
	}
	other := errors.New("boom")
	if _, ok := invalid.As(other); ok {
		t.Fatal("a plain error is not invalid")
	}
	if got := invalid.InEntry("limits", 0, other); got != other {
		t.Fatalf("InEntry changed another error: %v", got)
	}
}
