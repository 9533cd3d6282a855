package access_test

import (
	"errors"
	"testing"

	"github.com/unkeyed/ratelimit/services/access"
)

// TestAuthenticate: with no key every caller is the open principal; with
// keys, a bearer token in any case of the scheme finds its principal, and
// a missing or unknown one is refused as such.
func TestAuthenticate(t *testing.T) {
	if pr, err := access.Authenticate(access.Tokens{}, ""); err != nil || pr.Workspace != access.OpenWorkspace || pr.KeyID != access.OpenKeyID {
		t.Fatalf("open: %+v, %v", pr, err)
	}
	tokens, err := access.ParseTokens("tok_0123456789abcdef=ws_a")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"Bearer tok_0123456789abcdef", "bearer  tok_0123456789abcdef", "BEARER tok_0123456789abcdef"} {
		if pr, err := access.Authenticate(tokens, h); err != nil || pr.Workspace != "ws_a" || !pr.Permissions.Allows(access.Limit, "any") {
			t.Errorf("%q: %+v, %v", h, pr, err)
		}
	}
	for h, want := range map[string]error{"": access.ErrMissingToken, "Basic abc": access.ErrMissingToken, "Bearer ": access.ErrMissingToken,
		"Bearer tok_unknown_0123456789": access.ErrUnknownToken} {
		if _, err := access.Authenticate(tokens, h); !errors.Is(err, want) {
			t.Errorf("%q: %v, want %v", h, err, want)
		}
	}
}

// TestAuthorize: a principal is refused what its permissions lack, naming
// the permission.
func TestAuthorize(t *testing.T) {
	perms, err := access.Parse([]string{"ratelimit.api.limit"})
	if err != nil {
		t.Fatal(err)
	}
	pr := access.Principal{Workspace: "ws", Permissions: perms}
	if err := pr.Authorize(access.Limit, "api"); err != nil {
		t.Fatal(err)
	}
	var de *access.DeniedError
	if err := pr.Authorize(access.SetOverride, "api"); !errors.As(err, &de) || de.Permission != "ratelimit.api.set_override" {
		t.Fatalf("set_override: %v", err)
	}
	if err := (access.Principal{}).Authorize(access.Limit, "api"); err == nil {
		t.Fatal("a principal of no workspace may do something")
	}
}
