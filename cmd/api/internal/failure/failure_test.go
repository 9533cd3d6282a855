package failure_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/unkeyed/ratelimit/cmd/api/internal/failure"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/keys"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/reservation"
)

// TestClassify: each error of the domain, wrapped as the layers wrap it,
// is sorted into its kind with the caller's message; anything else is
// internal, with no message for the caller.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind failure.Kind
	}{
		{&invalid.Error{Field: "limit", Rule: "must be at least 1"}, failure.KindInvalidArgument},
		{access.ErrUnknownToken, failure.KindUnauthenticated},
		{&access.DeniedError{Permission: "ratelimit.api.limit"}, failure.KindPermissionDenied},
		{access.ErrKeysNotLoaded, failure.KindUnavailable},
		{reservation.ErrUnavailable, failure.KindUnavailable},
		{&reservation.SettledError{Cost: 3}, failure.KindConflict},
		{access.ErrKeyNotFound, failure.KindNotFound},
		{overrides.ErrNotFound, failure.KindNotFound},
		{&ratelimit.CapacityError{Max: 5}, failure.KindResourceExhausted},
		{&keys.CapacityError{Max: 1}, failure.KindResourceExhausted},
		{failure.ErrBusy, failure.KindResourceExhausted},
		{context.DeadlineExceeded, failure.KindDeadlineExceeded},
		{context.Canceled, failure.KindCanceled},
		{fmt.Errorf("boom"), failure.KindInternal},
	} {
		f := failure.Classify(fmt.Errorf("a layer: %w", tc.err))
		if f.Kind != tc.kind {
			t.Errorf("%v: kind %v, want %v", tc.err, f.Kind, tc.kind)
		}
		if (f.Message == "") != (tc.kind == failure.KindInternal) {
			t.Errorf("%v: message %q", tc.err, f.Message)
		}
	}
}
