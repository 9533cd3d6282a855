package pipeline

import (
	"context"
	"encoding/base64"
	"errors"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/audit"
	auditstore "github.com/unkeyed/ratelimit/services/audit/store"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// ListOverrides returns a page of at most limit of the caller's workspace's
// overrides in namespace, after cursor ("" for the first page), and the
// cursor of the next page ("" after the last). A cursor is the last
// identifier of its page, base64-encoded so that clients treat it as
// opaque.
func (p *Pipeline) ListOverrides(ctx context.Context, namespace, cursor string, limit int) ([]overrides.Override, string, error) {
	if err := authorizeNamespace(ctx, access.ReadOverride, namespace); err != nil {
		return nil, "", err
	}
	after, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, "", &invalid.Error{Field: "cursor", Rule: "must be a cursor from a previous page"}
	}
	page, more, err := p.overrides.List(ctx, call.Workspace(ctx), namespace, string(after), limit)
	if err != nil || !more {
		return page, "", err
	}
	return page, base64.RawURLEncoding.EncodeToString([]byte(page[len(page)-1].Identifier)), nil
}

// SetOverride sets o in the caller's workspace (o.Workspace is ignored), if
// the caller may set overrides in its namespace, and records the change in
// the audit log.
func (p *Pipeline) SetOverride(ctx context.Context, o overrides.Override) (overrides.Override, error) {
	return p.setOverride(ctx, o, false)
}

// SetLimitOverride is SetOverride for an API that says only an override's
// limit and duration (Unkey's v2): the override keeps the burst and the
// shadow mode it has, where SetOverride sets o's.
func (p *Pipeline) SetLimitOverride(ctx context.Context, o overrides.Override) (overrides.Override, error) {
	return p.setOverride(ctx, o, true)
}

func (p *Pipeline) setOverride(ctx context.Context, o overrides.Override, limitOnly bool) (overrides.Override, error) {
	if err := authorizeNamespace(ctx, access.SetOverride, o.Namespace); err != nil {
		return overrides.Override{}, err
	}
	o.Workspace = call.Workspace(ctx)
	before, err := p.overrideBefore(ctx, o.Namespace, o.Identifier)
	if err != nil {
		return overrides.Override{}, err
	}
	if limitOnly && before != nil {
		o.Burst, o.Shadow = before.Burst, before.Shadow
	}
	if before != nil && before.Limit == o.Limit && before.Duration == o.Duration && before.Burst == o.Burst && before.Shadow == o.Shadow {
		// Setting what is set changes nothing: nothing is written, and the
		// audit log keeps changes, not requests.
		return *before, nil
	}
	if err := p.admitChange(ctx); err != nil {
		return overrides.Override{}, err
	}
	after, err := p.overrides.Set(ctx, o)
	if err != nil {
		return overrides.Override{}, err
	}
	action := audit.OverrideUpdate
	if before == nil {
		action = audit.OverrideCreate
	}
	p.recordOverride(ctx, action, o.Namespace, o.Identifier, before, &after)
	return after, nil
}

// overrideBefore reads the override a change replaces, for its audit
// entry: nil if there is none, or if it does not validate (the change
// will then be refused naming why).
func (p *Pipeline) overrideBefore(ctx context.Context, namespace, identifier string) (*overrides.Override, error) {
	o, err := p.overrides.Get(ctx, call.Workspace(ctx), namespace, identifier)
	var ve *invalid.Error
	switch {
	case errors.Is(err, overrides.ErrNotFound) || errors.As(err, &ve):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &o, nil
}

// admitChange takes an audited change of the caller's workspace's rate
// (see audit.Writer.Admit), before the change is made.
func (p *Pipeline) admitChange(ctx context.Context) error {
	if p.audit == nil {
		return nil
	}
	return p.audit.Admit(call.Workspace(ctx))
}

// recordOverride writes the audit entry of an override's change.
func (p *Pipeline) recordOverride(ctx context.Context, action, namespace, identifier string, before, after *overrides.Override) {
	p.audited(ctx, action, audit.OverrideTarget(namespace, identifier), overrideValue(before), overrideValue(after))
}

// audited writes the audit entry of the caller's change of target, from
// before to after (as the audit log shows them).
func (p *Pipeline) audited(ctx context.Context, action, target, before, after string) {
	if p.audit == nil {
		return
	}
	pr := call.PrincipalOf(ctx)
	p.audit.Write(ctx, auditstore.Entry{Workspace: pr.Workspace, Actor: pr.KeyID, Action: action,
		Target: target, Before: before, After: after, RequestID: call.RequestID(ctx)})
}

// overrideValue is what the audit log shows of an override.
func overrideValue(o *overrides.Override) string {
	if o == nil {
		return ""
	}
	v := map[string]any{"id": o.ID, "limit": o.Limit, "duration": o.Duration.Milliseconds()}
	if o.Burst > 0 {
		v["burst"] = o.Burst
	}
	if o.Shadow {
		v["shadow"] = true
	}
	return audit.JSON(v)
}

// GetOverride returns the override of identifier in the caller's
// workspace, if the caller may read the overrides of namespace.
func (p *Pipeline) GetOverride(ctx context.Context, namespace, identifier string) (overrides.Override, error) {
	if err := authorizeNamespace(ctx, access.ReadOverride, namespace); err != nil {
		return overrides.Override{}, err
	}
	return p.overrides.Get(ctx, call.Workspace(ctx), namespace, identifier)
}

// DeleteOverride deletes the override of identifier in the caller's
// workspace, if the caller may delete the overrides of namespace, and
// records the change in the audit log.
func (p *Pipeline) DeleteOverride(ctx context.Context, namespace, identifier string) error {
	if err := authorizeNamespace(ctx, access.DeleteOverride, namespace); err != nil {
		return err
	}
	before, err := p.overrideBefore(ctx, namespace, identifier)
	if err != nil {
		return err
	}
	if before != nil {
		if err := p.admitChange(ctx); err != nil {
			return err
		}
	}
	if err := p.overrides.Delete(ctx, call.Workspace(ctx), namespace, identifier); err != nil {
		return err
	}
	p.recordOverride(ctx, audit.OverrideDelete, namespace, identifier, before, nil)
	return nil
}

// authorizeNamespace checks namespace before the permission, so that a
// malformed one is answered as invalid, not as a permission nobody could
// hold.
func authorizeNamespace(ctx context.Context, action access.Action, namespace string) error {
	if err := ratelimit.CheckName("namespace", namespace, ratelimit.MaxNameLength); err != nil {
		return err
	}
	return call.Authorize(ctx, action, namespace)
}

// Milliseconds converts a duration in ms from the API. One outside the
// valid range stays outside it (the conversion saturates instead of
// overflowing), so validation reports it.
func Milliseconds(ms int64) time.Duration {
	ms = min(max(ms, -1), ratelimit.MaxWindow.Milliseconds()+1)
	return time.Duration(ms) * time.Millisecond
}
