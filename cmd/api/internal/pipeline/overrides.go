package pipeline

import (
	"context"
	"encoding/base64"
	"time"

	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// ListOverrides returns a page of at most limit of the workspace's
// overrides in namespace, after cursor ("" for the first page), and the
// cursor of the next page ("" after the last). A cursor is the last
// identifier of its page, base64-encoded so that clients treat it as
// opaque.
func (p *Pipeline) ListOverrides(ctx context.Context, workspace, namespace, cursor string, limit int) ([]overrides.Override, string, error) {
	after, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, "", &ratelimit.ValidationError{Field: "cursor", Rule: "must be a cursor from a previous page"}
	}
	page, more, err := p.overrides.List(ctx, workspace, namespace, string(after), limit)
	if err != nil || !more {
		return page, "", err
	}
	return page, base64.RawURLEncoding.EncodeToString([]byte(page[len(page)-1].Identifier)), nil
}

// Milliseconds converts a duration in ms from the API. One outside the
// valid range stays outside it (the conversion saturates instead of
// overflowing), so validation reports it.
func Milliseconds(ms int64) time.Duration {
	ms = min(max(ms, -1), ratelimit.MaxWindow.Milliseconds()+1)
	return time.Duration(ms) * time.Millisecond
}
