package storetest

import (
	"testing"

	"github.com/unkeyed/ratelimit/services/overrides/store"
)

func TestMem(t *testing.T) {
	TestOverrides(t, func(*testing.T) store.Overrides { return &Mem{} })
}
