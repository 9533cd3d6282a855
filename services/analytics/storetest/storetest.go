// Package storetest is the contract suite of the analytics' stores: every
// store.Store runs TestStore, and every store.Fleet TestFleet, against the
// real thing.
package storetest

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/services/analytics"
	"github.com/unkeyed/ratelimit/services/analytics/store"
)

// TestStore checks the contract of a store.Store, which must be empty: added counts add up, per minute and
// over coarser buckets; named identifiers add up over a range and come back
// the most denied first; other workspaces and namespaces stay apart.
func TestStore(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().Truncate(time.Hour).Add(-2 * time.Hour) // within the minutes' span, on an hour
	m := func(i int) time.Time { return now.Add(time.Duration(i) * time.Minute) }
	b := func(ws, ns string, minute int, passed, denied int64) store.Bucket {
		return store.Bucket{Workspace: ws, Namespace: ns, Start: m(minute), Passed: passed, Denied: denied}
	}
	e := func(minute int, id string, passed, denied int64) store.Entry {
		return store.Entry{Bucket: b("ws", "api", minute, passed, denied), Identifier: id}
	}
	first := []store.Bucket{b("ws", "api", 0, 10, 2), b("ws", "api", 1, 5, 0), b("ws", "other", 0, 7, 7), b("ws2", "api", 0, 1, 1)}
	firstTop := []store.Entry{e(0, "alice", 3, 2), e(0, "bob", 7, 0), e(1, "bob", 5, 0)}
	if err := s.Add(ctx, "p1-1", first, firstTop); err != nil {
		t.Fatal(err)
	}
	// The same batch sent again (its answer lost) adds nothing.
	if err := s.Add(ctx, "p1-1", first, firstTop); err != nil {
		t.Fatal(err)
	}
	// A second process adds to the same minute, shadow denials among its
	// decisions (counted apart from both).
	shadowed, dave := b("ws", "api", 0, 1, 3), e(0, "dave", 0, 0)
	shadowed.ShadowDenied, dave.ShadowDenied = 4, 4
	if err := s.Add(ctx, "p2-1", []store.Bucket{shadowed}, []store.Entry{e(0, "alice", 0, 3), e(0, "carol", 1, 0), dave}); err != nil {
		t.Fatal(err)
	}
	series, err := s.Series(ctx, "ws", "api", store.Minute, m(0), m(60))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]store.Point{{Start: m(0), Passed: 11, Denied: 5, ShadowDenied: 4}, {Start: m(1), Passed: 5}})
	if fmt.Sprint(series) != want {
		t.Errorf("minutes: %v, want %v", series, want)
	}
	hours, err := s.Series(ctx, "ws", "api", store.Hour, m(0), m(60))
	if err != nil || len(hours) != 1 || hours[0].Passed != 16 || hours[0].Denied != 5 || hours[0].ShadowDenied != 4 || !hours[0].Start.Equal(m(0)) {
		t.Errorf("hours: %v, %v; want one of 16 passed, 5 denied, 4 shadow-denied", hours, err)
	}
	top, err := s.Top(ctx, "ws", "api", m(0), m(60), 10)
	if err != nil {
		t.Fatal(err)
	}
	// The most denied, then the most shadow-denied, then the busiest.
	if want := "[{alice 3 5 0} {dave 0 0 4} {bob 12 0 0} {carol 1 0 0}]"; fmt.Sprint(top) != want {
		t.Errorf("top: %v, want %s", top, want)
	}
	if top, _ := s.Top(ctx, "ws", "api", m(1), m(2), 10); fmt.Sprint(top) != "[{bob 5 0 0}]" {
		t.Errorf("top of the second minute: %v", top)
	}
	if top, _ := s.Top(ctx, "ws", "api", m(0), m(60), 1); len(top) != 1 || top[0].Identifier != "alice" {
		t.Errorf("top 1: %v", top)
	}
	if ns, err := s.Namespaces(ctx, "ws", m(0), m(60), 10); err != nil || fmt.Sprint(ns) != "[{other 7 7 0} {api 16 5 4}]" {
		t.Errorf("namespaces: %v, %v; want other (7 denied) before api (5)", ns, err)
	}
}

// TestFleet checks the contract of a store.Fleet fed by a recorder: each flush
// records the process with the recorder's flush interval, seen by the
// fleet's clock, and Processes leaves out those seen longer ago than asked.
func TestFleet(t *testing.T, st store.Store, fleet store.Fleet, age func(id string, by time.Duration)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := analytics.NewRecorder(st, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
		analytics.WithFlushInterval(50*time.Millisecond),
		analytics.WithRollCall(fleet, func() store.Process {
			return store.Process{ID: "proc_1", Region: "eu", Breakers: map[string]string{"10.0.0.1:6379": "closed"}}
		}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	var got []store.Process
	var now time.Time
	poll.Until(t, 10*time.Second, "the process's roll call", func() bool {
		got, now, _ = fleet.Processes(ctx, time.Minute)
		return len(got) == 1
	})
	cancel()
	<-done
	p := got[0]
	if p.ID != "proc_1" || p.Region != "eu" || p.FlushInterval != 50*time.Millisecond || p.Breakers["10.0.0.1:6379"] != "closed" ||
		!p.Live(now) || now.Sub(p.SeenAt) < 0 || now.Sub(p.SeenAt) > 5*time.Second {
		t.Fatalf("the roll call %+v at %v, want proc_1 of eu reporting every 50ms, live", p, now)
	}
	// The process stops: two minutes on it is listed in a window of five,
	// gone, and left out of one of a minute.
	age("proc_1", 2*time.Minute)
	got, now, err = fleet.Processes(context.Background(), 5*time.Minute)
	if err != nil || len(got) != 1 || got[0].Live(now) || now.Sub(got[0].SeenAt) < 2*time.Minute {
		t.Fatalf("two minutes after its last report: %+v at %v (%v), want it listed, gone", got, now, err)
	}
	if got, _, err := fleet.Processes(context.Background(), time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("processes seen in the last minute: %+v (%v), want none", got, err)
	}
}
