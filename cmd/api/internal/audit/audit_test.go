package audit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/audit"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
)

// testLog is the contract of a Log: entries come back newest first, one
// workspace's only, filtered and paged.
func testLog(t *testing.T, log audit.Log) {
	ctx := context.Background()
	start := time.Now().Add(-time.Second)
	for i := range 6 {
		action := audit.OverrideCreate
		if i%2 == 1 {
			action = audit.KeyCreate
		}
		if err := log.Record(ctx, audit.Entry{Workspace: "ws", Actor: fmt.Sprint("key_", i%3), Action: action,
			Target: fmt.Sprint("t", i), After: `{"n":1}`, RequestID: fmt.Sprint("req_", i)}); err != nil {
			t.Fatal(err)
		}
	}
	log.Record(ctx, audit.Entry{Workspace: "other", Actor: "key_0", Action: audit.KeyCreate, Target: "t9"})

	all, err := log.List(ctx, "ws", audit.Filter{}, 0, 100)
	if err != nil || len(all) != 6 {
		t.Fatalf("List = %d entries, %v; want 6", len(all), err)
	}
	for i, e := range all {
		if want := fmt.Sprint("t", 5-i); e.Target != want || e.Time.Before(start) || e.ID == 0 {
			t.Fatalf("entry %d: %+v, want target %s, newest first, stamped", i, e, want)
		}
	}
	for _, tc := range []struct {
		f    audit.Filter
		want int
	}{
		{audit.Filter{Action: audit.KeyCreate}, 3},
		{audit.Filter{Actor: "key_0"}, 2},
		{audit.Filter{Target: "t4"}, 1},
		{audit.Filter{Action: audit.KeyCreate, Actor: "key_0"}, 1},
		{audit.Filter{Since: time.Now().Add(time.Hour)}, 0},
		{audit.Filter{Until: start}, 0},
		{audit.Filter{Since: start, Until: time.Now().Add(time.Hour)}, 6},
	} {
		got, err := log.List(ctx, "ws", tc.f, 0, 100)
		if err != nil || len(got) != tc.want {
			t.Fatalf("List(%+v) = %d entries, %v; want %d", tc.f, len(got), err, tc.want)
		}
	}
	var pages []string
	before := int64(0)
	for {
		page, err := log.List(ctx, "ws", audit.Filter{}, before, 4)
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

func TestMemory(t *testing.T) { testLog(t, audit.NewMemory(100)) }

func TestMySQL(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	testLog(t, audit.NewMySQL(sqlDB))
}

// TestMemoryIsBounded: a Memory keeps its latest max entries.
func TestMemoryIsBounded(t *testing.T) {
	m := audit.NewMemory(3)
	for i := range 10 {
		m.Record(context.Background(), audit.Entry{Workspace: "ws", Target: fmt.Sprint(i)})
	}
	got, _ := m.List(context.Background(), "ws", audit.Filter{}, 0, 100)
	if len(got) != 3 || got[0].Target != "9" || got[2].Target != "7" {
		t.Fatalf("kept %+v, want the latest 3", got)
	}
}

// TestOverrideTarget: two overrides are never one target, whatever their
// namespace and identifier hold.
func TestOverrideTarget(t *testing.T) {
	if a, b := audit.OverrideTarget("a/b", "c"), audit.OverrideTarget("a", "b/c"); a == b {
		t.Fatalf("two overrides share the target %q", a)
	}
	if got := audit.OverrideTarget("sms.sign_up", "user/42"); got != "sms.sign_up/user/42" {
		t.Fatalf("a plain namespace: %q", got)
	}
	if a, b := audit.OverrideTarget("a%2Fb", "c"), audit.OverrideTarget("a/b", "c"); a == b {
		t.Fatalf("an escape in a namespace reads as a slash: %q", a)
	}
}
