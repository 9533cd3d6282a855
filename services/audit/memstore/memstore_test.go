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

// TestBoundedPerWorkspace: one workspace's entries never push another's
// out. Before, the 10,000 entries were shared: 10,000 updates of A's in
// 2.2 s left B with none.
func TestBoundedPerWorkspace(t *testing.T) {
	m := memstore.New(100)
	for i := range 5 {
		m.Record(context.Background(), store.Entry{Workspace: "b", Target: fmt.Sprint(i)})
	}
	for i := range 10_000 {
		m.Record(context.Background(), store.Entry{Workspace: "a", Target: fmt.Sprint(i)})
	}
	if got, _ := m.List(context.Background(), "b", store.Filter{}, 0, 100); len(got) != 5 || got[0].Target != "4" {
		t.Fatalf("B's history after 10,000 of A's entries: %+v, want its 5", got)
	}
	if got, _ := m.List(context.Background(), "a", store.Filter{}, 0, 1000); len(got) != 100 || got[0].Target != "9999" {
		t.Fatalf("A kept %d entries (latest %v), want its latest 100", len(got), got[0].Target)
	}
}
