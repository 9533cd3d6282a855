package audit_test

import (
	"testing"

	"github.com/unkeyed/ratelimit/services/audit"
)

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
