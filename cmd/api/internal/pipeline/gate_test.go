package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBatchGateIsPerWorkspace: a workspace with its batch entries in
// flight at the bound waits (here until its deadline); another workspace
// does not; a batch larger than the bound takes the whole bound.
func TestBatchGateIsPerWorkspace(t *testing.T) {
	g := newBatchGate(100)
	leave, err := g.enter(context.Background(), "a", 1000)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := g.enter(ctx, "a", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second batch of the same workspace: %v, want it to wait until its deadline", err)
	}
	leaveB, err := g.enter(context.Background(), "b", 100)
	if err != nil {
		t.Fatalf("another workspace: %v", err)
	}
	leaveB()
	leave()
	if leave, err := g.enter(context.Background(), "a", 100); err != nil {
		t.Fatalf("after the first batch ended: %v", err)
	} else {
		leave()
	}
}
