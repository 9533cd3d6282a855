// Package storetest is the contract suite of the audit log's stores:
// every store.Log runs TestLog against the real thing.
package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/audit"
	"github.com/unkeyed/ratelimit/services/audit/store"
)

// TestLog checks the contract of a store.Log on log, which must be empty:
// entries come back newest first, stamped with an ID and a time, one
// workspace's only, filtered and paged.
func TestLog(t *testing.T, log store.Log) {
	ctx := context.Background()
	start := time.Now().Add(-time.Second)
	for i := range 6 {
		action := audit.OverrideCreate
		if i%2 == 1 {
			action = audit.KeyCreate
		}
		if err := log.Record(ctx, store.Entry{Workspace: "ws", Actor: fmt.Sprint("key_", i%3), Action: action,
			Target: fmt.Sprint("t", i), After: `{"n":1}`, RequestID: fmt.Sprint("req_", i)}); err != nil {
			t.Fatal(err)
		}
	}
	log.Record(ctx, store.Entry{Workspace: "other", Actor: "key_0", Action: audit.KeyCreate, Target: "t9"})

	all, err := log.List(ctx, "ws", store.Filter{}, 0, 100)
	if err != nil || len(all) != 6 {
		t.Fatalf("List = %d entries, %v; want 6", len(all), err)
	}
	for i, e := range all {
		if want := fmt.Sprint("t", 5-i); e.Target != want || e.Time.Before(start) || e.ID == 0 {
			t.Fatalf("entry %d: %+v, want target %s, newest first, stamped", i, e, want)
		}
	}
	for _, tc := range []struct {
		f    store.Filter
		want int
	}{
		{store.Filter{Action: audit.KeyCreate}, 3},
		{store.Filter{Actor: "key_0"}, 2},
		{store.Filter{Target: "t4"}, 1},
		{store.Filter{Action: audit.KeyCreate, Actor: "key_0"}, 1},
		{store.Filter{Since: time.Now().Add(time.Hour)}, 0},
		{store.Filter{Until: start}, 0},
		{store.Filter{Since: start, Until: time.Now().Add(time.Hour)}, 6},
	} {
		got, err := log.List(ctx, "ws", tc.f, 0, 100)
		if err != nil || len(got) != tc.want {
			t.Fatalf("List(%+v) = %d entries, %v; want %d", tc.f, len(got), err, tc.want)
		}
	}
	var pages []string
	before := int64(0)
	for {
		page, err := log.List(ctx, "ws", store.Filter{}, before, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			pages = append(pages, e.Target)
		}
		if len(page) < 4 {
			break
		}
		before = page[len(page)-1].ID
	}
	if fmt.Sprint(pages) != "[t5 t4 t3 t2 t1 t0]" {
		t.Fatalf("pages listed %v", pages)
	}
}
