package overrides

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/overrides/memstore"
	"github.com/unkeyed/ratelimit/services/overrides/store"
)

// TestCapsHoldUnderConcurrency: 300 concurrent Sets of new floating
// patterns in one namespace, and of new overrides in a workspace capped at
// 10, create no more than their caps (before: 300 of each).
func TestCapsHoldUnderConcurrency(t *testing.T) {
	s := newRegistry(t, WithMaxPerWorkspace(10))
	var wg sync.WaitGroup
	var created atomic.Int64
	for i := range 300 {
		wg.Go(func() {
			if _, err := s.Set(context.Background(), Override{Workspace: "ws", Namespace: "ns", Identifier: fmt.Sprint("id_", i),
				Limit: 1, Duration: time.Minute}); err == nil {
				created.Add(1)
			}
		})
	}
	wg.Wait()
	if got := created.Load(); got != 10 {
		t.Fatalf("%d overrides created in a workspace capped at 10", got)
	}
	p := newRegistry(t)
	created.Store(0)
	for i := range 300 {
		wg.Go(func() {
			if _, err := p.Set(context.Background(), Override{Workspace: "ws", Namespace: "ns", Identifier: fmt.Sprint("*x", i, "*"),
				Limit: 1, Duration: time.Minute}); err == nil {
				created.Add(1)
			}
		})
	}
	wg.Wait()
	if got := created.Load(); got != MaxFloatingPatterns {
		t.Fatalf("%d floating patterns created, want the cap of %d", got, MaxFloatingPatterns)
	}
}

// lateCommits is a store whose changes of one identifier become visible
// only once reveal is set, with the revision their statement began with:
// a commit that waited behind a lock.
type lateCommits struct {
	store.Overrides
	hidden string
	reveal atomic.Bool
}

func (l *lateCommits) Changes(ctx context.Context, since int64) ([]store.Change, error) {
	all, err := l.Overrides.Changes(ctx, since)
	if l.reveal.Load() {
		return all, err
	}
	out := all[:0]
	for _, c := range all {
		if c.Identifier != l.hidden {
			out = append(out, c)
		}
	}
	return out, err
}

type stepClock struct{ us atomic.Int64 }

func (c *stepClock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// TestSlowCommitIsReconciled: a change whose commit became visible 4 s
// after its statement began (longer than a poll looks back) reaches
// another process at its next reconciling poll, within reconcileEvery
// (before: never, short of the 12-hour reload).
func TestSlowCommitIsReconciled(t *testing.T) {
	clock := &stepClock{}
	clock.us.Store(time.Hour.Microseconds())
	shared := &lateCommits{Overrides: memstore.New(memstore.WithClock(clock)), hidden: "slow"}
	a := newRegistry(t, WithStore(shared))
	b := newRegistry(t, WithStore(shared))
	ctx := context.Background()
	if err := b.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Set(ctx, Override{Workspace: "ws", Namespace: "ns", Identifier: "slow", Limit: 50, Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for range 4 { // polls every second while the commit waits
		clock.us.Add(time.Second.Microseconds())
		if err := b.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	shared.reveal.Store(true) // committed, with its old revision
	lookups := 0
	for ; lookups < 40; lookups++ {
		clock.us.Add(time.Second.Microseconds())
		if err := b.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if o, ok := b.Lookup("ws", "ns", "slow"); ok && o.Limit == 50 {
			break
		}
	}
	if lookups >= int(reconcileEvery/time.Second)+1 {
		t.Fatalf("the slow commit reached the other process after %d polls a second apart, want within %v", lookups+1, reconcileEvery)
	}
}
