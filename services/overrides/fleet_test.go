package overrides

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/services/overrides/mysqlstore"
	"github.com/unkeyed/ratelimit/services/overrides/store"
)

// skewedClock is the wall clock moved by offset: a host whose clock
// disagrees with the others'.
type skewedClock time.Duration

func (c skewedClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// TestClockSkewDoesNotReorderChanges runs three processes on one real
// MariaDB with clocks 30 s ahead, 30 s behind and right. Every change
// reaches every process within a poll interval and a second, and the
// processes end in the state the database committed last: a lowered limit
// or a deletion made on a process whose clock is behind is never undone by
// an earlier change stamped by a clock that is ahead.
func TestClockSkewDoesNotReorderChanges(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	const pollEvery = 50 * time.Millisecond
	var procs []*Registry
	for _, skew := range []time.Duration{30 * time.Second, -30 * time.Second, 0} {
		s := newRegistry(t, WithStore(mysqlstore.New(sqlDB)), WithClock(skewedClock(skew)), WithPollInterval(pollEvery))
		if err := s.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		procs = append(procs, s)
	}
	ahead, behind := procs[0], procs[1]
	ctx := context.Background()
	everywhere := func(what, id string, want int64) {
		t.Helper()
		poll.Until(t, pollEvery+time.Second, what, func() bool {
			for _, s := range procs {
				o, ok := s.Lookup("ws", "ns", id)
				if want == 0 && ok || want != 0 && (!ok || o.Limit != want) {
					return false
				}
			}
			return true
		})
	}
	set(t, ahead, "ns", "lowered", 100)
	set(t, behind, "ns", "lowered", 1)
	everywhere("the limit lowered by the process behind to apply everywhere", "lowered", 1)

	set(t, ahead, "ns", "deleted", 100)
	everywhere("the override to apply everywhere", "deleted", 100)
	if err := behind.Delete(ctx, "ws", "ns", "deleted"); err != nil {
		t.Fatal(err)
	}
	everywhere("the deletion by the process behind to apply everywhere", "deleted", 0)

	set(t, behind, "ns", "revived", 5)
	if err := ahead.Delete(ctx, "ws", "ns", "revived"); err != nil {
		t.Fatal(err)
	}
	set(t, behind, "ns", "revived", 7)
	everywhere("the override set again by the process behind to apply everywhere", "revived", 7)
}

// TestEachChangeAppliedOnce: a poll reads a change again within its
// look-back, and applies it once.
func TestEachChangeAppliedOnce(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	writer := newRegistry(t, WithStore(mysqlstore.New(sqlDB)))
	reader := newRegistry(t, WithStore(mysqlstore.New(sqlDB)))
	ctx := context.Background()
	if err := reader.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		set(t, writer, "ns", fmt.Sprint("id", i), 10)
	}
	if err := reader.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := writer.Delete(ctx, "ws", "ns", "id3"); err != nil {
		t.Fatal(err)
	}
	// Polls until the changes have left the look-back, then two more.
	polls := 0
	for start := time.Now(); time.Since(start) < pollLookback+200*time.Millisecond || polls < 2; polls++ {
		if err := reader.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	applied, stale := testutil.ToFloat64(reader.metrics.applied), testutil.ToFloat64(reader.metrics.stale)
	t.Logf("%d polls: %v changes applied, %v read again and skipped", polls, applied, stale)
	if applied != 11 {
		t.Fatalf("the reader applied %v changes over %d polls, want each of the 11 once", applied, polls)
	}
	if stale == 0 {
		t.Fatal("no change was read twice: the test's polls did not overlap the look-back, so it shows nothing")
	}
	if _, ok := reader.Lookup("ws", "ns", "id3"); ok {
		t.Fatal("the deleted override applies")
	}
}

// TestCapPerWorkspace: past the cap a new override is refused with a
// CapacityError and nothing is written; replacing one, another workspace,
// and a new one after a deletion are allowed.
func TestCapPerWorkspace(t *testing.T) {
	for name, store := range map[string]func(t *testing.T) Option{
		"memory": func(*testing.T) Option { return func(*Registry) {} },
		"mysql": func(t *testing.T) Option {
			_, sqlDB := dbtest.Start(t)
			return WithStore(mysqlstore.New(sqlDB))
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := newRegistry(t, store(t), WithMaxPerWorkspace(3))
			ctx := context.Background()
			for i := range 3 {
				set(t, s, "ns", fmt.Sprint("id", i), 1)
			}
			_, err := s.Set(ctx, Override{Workspace: "ws", Namespace: "other", Identifier: "x*", Limit: 1, Duration: time.Minute})
			var ce *CapacityError
			if !errors.As(err, &ce) || ce.Max != 3 {
				t.Fatalf("a fourth override: %v, want a CapacityError of 3", err)
			}
			if _, err := s.Get(ctx, "ws", "other", "x*"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("the refused override was written: %v", err)
			}
			set(t, s, "ns", "id1", 2) // replacing is allowed
			if _, err := s.Set(ctx, Override{Workspace: "ws2", Namespace: "ns", Identifier: "a", Limit: 1, Duration: time.Minute}); err != nil {
				t.Fatalf("another workspace: %v", err)
			}
			if err := s.Delete(ctx, "ws", "ns", "id0"); err != nil {
				t.Fatal(err)
			}
			set(t, s, "ns", "id3", 1)
		})
	}
}

// pageCounter is a store whose start-up load pages are counted, and that
// cancels the load's context after the first, as a SIGTERM would.
type pageCounter struct {
	store.Overrides
	pages  int
	cancel context.CancelFunc
}

func (p *pageCounter) Page(ctx context.Context, after int64, limit int) ([]Change, int64, error) {
	p.pages++
	if p.pages == 1 {
		p.cancel()
	}
	return p.Overrides.Page(ctx, after, limit)
}

// TestLoadInPagesStopsWhenCancelled: the start-up load reads every
// override in pages, and a cancelled context stops it after the page under
// way.
func TestLoadInPagesStopsWhenCancelled(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	insertOverrides(t, sqlDB, 3*loadPageSize/2, func(i int) (string, string, string) { return "ws", "ns", fmt.Sprint("id", i) })
	full := newRegistry(t, WithStore(mysqlstore.New(sqlDB)))
	if err := full.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := full.idx.live.Load(); got != 3*loadPageSize/2 {
		t.Fatalf("loaded %d overrides, want %d", got, 3*loadPageSize/2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	counter := &pageCounter{Overrides: mysqlstore.New(sqlDB), cancel: cancel}
	stopped := newRegistry(t, WithStore(counter))
	if err := stopped.Load(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Load with its context cancelled during the first page: %v, want context.Canceled", err)
	}
	if counter.pages != 1 {
		t.Fatalf("%d pages read after the cancel, want the one under way", counter.pages)
	}
}

// TestReloadDropsWhatTheStoreNoLongerHolds: a process whose last poll is
// older than half the tombstone retention reads everything again, and
// drops the overrides whose deletions it missed (their tombstones purged).
func TestReloadDropsWhatTheStoreNoLongerHolds(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	a := newRegistry(t, WithStore(mysqlstore.New(sqlDB)))
	b := newRegistry(t, WithStore(mysqlstore.New(sqlDB)))
	ctx := context.Background()
	set(t, a, "ns", "kept", 1)
	set(t, a, "ns", "gone", 1)
	// They were set a minute ago: outside any look-back.
	if _, err := sqlDB.Exec("UPDATE ratelimit_overrides SET revision = revision - 60000000"); err != nil {
		t.Fatal(err)
	}
	if err := b.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, "ws", "ns", "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlDB.Exec("DELETE FROM ratelimit_overrides WHERE deleted_at > 0"); err != nil { // purged
		t.Fatal(err)
	}
	b.mu.Lock()
	b.polled -= TombstoneRetention.Microseconds() // b has not polled for a day
	b.mu.Unlock()
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Lookup("ws", "ns", "gone"); ok {
		t.Fatal("an override whose tombstone was purged still applies after the reload")
	}
	if _, ok := b.Lookup("ws", "ns", "kept"); !ok {
		t.Fatal("the reload dropped a live override")
	}
}
