package storetest

import (
	"testing"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

func TestMemRegional(t *testing.T) {
	TestRegional(t, func(*testing.T) store.Regional { return NewMemRegional() })
}

func TestMemGlobal(t *testing.T) {
	TestGlobal(t, func(*testing.T) store.Global { return NewMemGlobal() })
}
