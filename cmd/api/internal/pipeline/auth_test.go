package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/failure"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
)

// TestPermissions: a key without the permission a call needs is refused
// naming it, and nothing is counted or changed; a batch needs the
// permission of every namespace it names.
func TestPermissions(t *testing.T) {
	p, ov := newPipeline(t)
	perms, err := access.Parse([]string{"ratelimit.n.limit", "ratelimit.*.read_override"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: perms})
	admin := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	other := req("a", 1)
	other.Namespace = "other"

	denied := func(what string, err error, want string) {
		t.Helper()
		var de *access.DeniedError
		if !errors.As(err, &de) || de.Permission != want {
			t.Errorf("%s: %v, want a denial naming %s", what, err, want)
			return
		}
		if f := failure.Classify(err); f.Kind != failure.KindPermissionDenied || f.Message != "permission denied: this key lacks "+want {
			t.Errorf("%s: classified %+v", what, f)
		}
	}
	_, err = p.Limit(ctx, Call{Request: other})
	denied("Limit in another namespace", err, "ratelimit.other.limit")
	_, err = p.Batch(ctx, []Call{{Request: req("a", 1)}, {Request: other}})
	denied("Batch naming another namespace", err, "ratelimit.other.limit")
	_, err = p.Multi(ctx, []Call{{Request: req("a", 1)}, {Request: other}})
	denied("Multi naming another namespace", err, "ratelimit.other.limit")
	// Nothing of the refused batches was counted: the first limit-1 call
	// on "a" is still admitted.
	if d, err := p.Limit(ctx, Call{Request: req("a", 1)}); err != nil || !d.Success {
		t.Fatalf("Limit in its namespace after refused batches: %+v, %v", d, err)
	}

	o := overrides.Override{Workspace: "ws", Namespace: "n", Identifier: "x", Limit: 1_000_000, Duration: time.Hour}
	_, err = p.SetOverride(ctx, o)
	denied("SetOverride", err, "ratelimit.n.set_override")
	if _, err := ov.Get(context.Background(), "ws", "n", "x"); !errors.Is(err, overrides.ErrNotFound) {
		t.Fatalf("a refused SetOverride left an override: %v", err)
	}
	if _, err := p.SetOverride(admin, o); err != nil {
		t.Fatal(err)
	}
	err = p.DeleteOverride(ctx, "n", "x")
	denied("DeleteOverride", err, "ratelimit.n.delete_override")
	if got, err := p.GetOverride(ctx, "n", "x"); err != nil || got.Limit != o.Limit {
		t.Fatalf("GetOverride with read_override on *: %+v, %v (a refused delete must leave it)", got, err)
	}
	if page, _, err := p.ListOverrides(ctx, "n", "", 0); err != nil || len(page) != 1 {
		t.Fatalf("ListOverrides with read_override on *: %v, %v", page, err)
	}

	// The workspace is the key's, whatever a call or an override names.
	foreign := req("f", 1)
	foreign.Workspace = "ws_other"
	if _, err := p.Limit(ctx, Call{Request: foreign}); err != nil {
		t.Fatal(err)
	}
	if d, err := p.Limit(ctx, Call{Request: req("f", 1)}); err != nil || d.Success {
		t.Errorf("a call naming another workspace counted elsewhere: the key's own then got %+v, %v", d, err)
	}
	o.Workspace, o.Identifier = "ws_other", "y"
	if _, err := p.SetOverride(admin, o); err != nil {
		t.Fatal(err)
	}
	if _, err := ov.Get(context.Background(), "ws", "n", "y"); err != nil {
		t.Errorf("an override naming another workspace was not set in the key's: %v", err)
	}
	if _, err := ov.Get(context.Background(), "ws_other", "n", "y"); !errors.Is(err, overrides.ErrNotFound) {
		t.Errorf("an override was set in a workspace the key does not belong to: %v", err)
	}

	// A malformed namespace is invalid, whatever the key may do.
	if _, err := p.SetOverride(ctx, overrides.Override{Workspace: "ws", Identifier: "x", Limit: 1, Duration: time.Hour}); failure.Classify(err).Kind != failure.KindInvalidArgument {
		t.Errorf("SetOverride without a namespace: %v, want invalid", err)
	}
	// A context without a principal may do nothing: the request path
	// fails closed if an adapter ever forgets to authenticate.
	if _, err := p.Limit(context.Background(), Call{Request: req("a", 1)}); failure.Classify(err).Kind != failure.KindPermissionDenied {
		t.Errorf("Limit without a principal: %v, want a denial", err)
	}
}

// TestNamespaceAuthorizesOnce: Namespace refuses a caller that may not
// decide there, and its Limit decides only in that namespace, without a
// second check.
func TestNamespaceAuthorizesOnce(t *testing.T) {
	p, _ := newPipeline(t)
	perms, err := access.Parse([]string{"ratelimit.n.limit"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: perms})
	var de *access.DeniedError
	if _, err := p.Namespace(ctx, "other"); !errors.As(err, &de) || de.Permission != "ratelimit.other.limit" {
		t.Fatalf("Namespace(other): %v, want a denial", err)
	}
	ns, err := p.Namespace(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if d, err := ns.Limit(ctx, Call{Request: req("a", 1)}); err != nil || !d.Success {
		t.Fatalf("Limit in the namespace: %+v, %v", d, err)
	}
	other := req("a", 1)
	other.Namespace = "other"
	if _, err := ns.Limit(ctx, Call{Request: other}); !errors.As(err, &de) {
		t.Fatalf("Limit in another namespace through it: %v, want a denial", err)
	}
}
