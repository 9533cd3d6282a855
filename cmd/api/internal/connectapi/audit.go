package connectapi

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/audit"
	auditstore "github.com/unkeyed/ratelimit/services/audit/store"
)

// Audit serves AuditService on a layer, reading an auditstore.Log.
type Audit struct {
	layer *transport.Layer
	log   auditstore.Log
}

var _ ratelimitv1connect.AuditServiceHandler = (*Audit)(nil)

// NewAudit returns AuditService on l, reading log.
func NewAudit(l *transport.Layer, log auditstore.Log) *Audit { return &Audit{layer: l, log: log} }

// Register serves the service on mux behind the layer.
func (h *Audit) Register(mux *http.ServeMux) {
	path, service := ratelimitv1connect.NewAuditServiceHandler(h, h.layer.HandlerOptions(codecs)...)
	mux.Handle(path, route(h.layer, ratelimitv1.File_ratelimit_v1_keys_proto.Services().ByName("AuditService"), service))
}

// Bounds of a ListAuditLog request.
const (
	maxAuditPage   = 1000
	maxAuditTarget = 1024
)

// ListAuditLog implements AuditService.ListAuditLog.
func (h *Audit) ListAuditLog(ctx context.Context, req *connect.Request[ratelimitv1.ListAuditLogRequest]) (*connect.Response[ratelimitv1.ListAuditLogResponse], error) {
	entries, cursor, err := h.list(ctx, req.Msg)
	if err != nil {
		return nil, h.layer.ConnectError(ctx, ratelimitv1connect.AuditServiceListAuditLogProcedure, err)
	}
	out := &ratelimitv1.ListAuditLogResponse{Entries: make([]*ratelimitv1.AuditEntry, len(entries)), Cursor: cursor}
	for i, e := range entries {
		out.Entries[i] = &ratelimitv1.AuditEntry{Actor: e.Actor, Action: e.Action, Target: e.Target, Before: e.Before,
			After: e.After, Time: e.Time.UnixMilli(), RequestId: e.RequestID}
	}
	return connect.NewResponse(out), nil
}

// list checks the permission and the request, and reads a page.
func (h *Audit) list(ctx context.Context, m *ratelimitv1.ListAuditLogRequest) ([]auditstore.Entry, string, error) {
	pr := call.PrincipalOf(ctx)
	if !pr.Permissions.Has(access.ReadAudit) {
		return nil, "", &access.DeniedError{Permission: access.ReadAudit}
	}
	f := auditstore.Filter{Action: m.Action, Target: m.Target, Actor: m.Actor}
	switch {
	case f.Action != "" && !slices.Contains(audit.Actions, f.Action):
		return nil, "", &invalid.Error{Field: "action", Rule: "must be one of " + strings.Join(audit.Actions, ", ")}
	case len(f.Target) > maxAuditTarget:
		return nil, "", &invalid.Error{Field: "target", Rule: fmt.Sprintf("must be at most %d bytes", maxAuditTarget)}
	case len(f.Actor) > 64:
		return nil, "", &invalid.Error{Field: "actor", Rule: "must be at most 64 bytes"}
	case m.Since < 0 || m.Since > maxUnixMs:
		return nil, "", &invalid.Error{Field: "since", Rule: "must be a time in unix ms, or 0"}
	case m.Until < 0 || m.Until > maxUnixMs:
		return nil, "", &invalid.Error{Field: "until", Rule: "must be a time in unix ms, or 0"}
	case m.Limit < 0 || m.Limit > maxAuditPage:
		return nil, "", &invalid.Error{Field: "limit", Rule: fmt.Sprintf("must be between 1 and %d, or 0 for 100", maxAuditPage)}
	}
	if m.Since > 0 {
		f.Since = time.UnixMilli(m.Since)
	}
	if m.Until > 0 {
		f.Until = time.UnixMilli(m.Until)
	}
	var before int64
	if m.Cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(m.Cursor)
		if before, _ = strconv.ParseInt(string(raw), 10, 64); err != nil || before <= 0 {
			return nil, "", &invalid.Error{Field: "cursor", Rule: "must be a cursor from a previous page"}
		}
	}
	limit := int(m.Limit)
	if limit == 0 {
		limit = 100
	}
	page, err := h.log.List(ctx, pr.Workspace, f, before, limit+1)
	if err != nil {
		return nil, "", err
	}
	if len(page) <= limit {
		return page, "", nil
	}
	page = page[:limit]
	return page, base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(page[limit-1].ID, 10))), nil
}
