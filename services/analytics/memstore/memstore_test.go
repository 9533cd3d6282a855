package memstore_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/analytics/memstore"
	"github.com/unkeyed/ratelimit/services/analytics/storetest"
)

func TestContract(t *testing.T) {
	storetest.TestStore(t, memstore.New(1000, time.Now))
}

func TestFleet(t *testing.T) {
	var offset atomic.Int64
	mem := memstore.New(1000, func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	storetest.TestFleet(t, mem, mem, func(_ string, by time.Duration) { offset.Add(int64(by)) })
}
