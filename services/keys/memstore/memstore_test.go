package memstore_test

import (
	"testing"

	"github.com/unkeyed/ratelimit/services/keys/memstore"
	"github.com/unkeyed/ratelimit/services/keys/store"
	"github.com/unkeyed/ratelimit/services/keys/storetest"
)

func TestContract(t *testing.T) {
	storetest.TestStore(t, func(*testing.T) store.Store { return memstore.New() })
}
