package memstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/unkeyed/ratelimit/services/audit/memstore"
	"github.com/unkeyed/ratelimit/services/audit/store"
	"github.com/unkeyed/ratelimit/services/audit/storetest"
)

func TestContract(t *testing.T) { storetest.TestLog(t, memstore.New(100)) }

// TestBounded: a Store keeps its latest max entries.
func TestBounded(t *testing.T) {
	m := memstore.New(3)
	for i := range 10 {
		m.Record(context.Background(), store.Entry{Workspace: "ws", Target: fmt.Sprint(i)})
	}
	got, _ := m.List(context.Background(), "ws", store.Filter{}, 0, 100)
	if len(got) != 3 || got[0].Target != "9" || got[2].Target != "7" {
		t.Fatalf("kept %+v, want the latest 3", got)
	}
}
