package memstore_test

import (
	"testing"

	"github.com/unkeyed/ratelimit/services/overrides/memstore"
	"github.com/unkeyed/ratelimit/services/overrides/store"
	"github.com/unkeyed/ratelimit/services/overrides/storetest"
)

func TestContract(t *testing.T) {
	storetest.TestOverrides(t, func(*testing.T) store.Overrides { return memstore.New() })
}
