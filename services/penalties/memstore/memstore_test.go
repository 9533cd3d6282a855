package memstore_test

import (
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/penalties/memstore"
	"github.com/unkeyed/ratelimit/services/penalties/store"
	"github.com/unkeyed/ratelimit/services/penalties/storetest"
)

func TestContract(t *testing.T) {
	storetest.TestPenalties(t, func(*testing.T) store.Penalties { return memstore.New() },
		func() int64 { return time.Now().UnixMilli() })
}
