package connectapi

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/keys"
)

// Keys serves KeyService on a layer, managing keys with a keys.Manager.
type Keys struct {
	layer   *transport.Layer
	manager *keys.Manager // nil: no MySQL, nowhere to keep keys
}

var _ ratelimitv1connect.KeyServiceHandler = (*Keys)(nil)

// NewKeys returns KeyService on l. With a nil manager (a process without
// MySQL) every call answers unimplemented, saying why.
func NewKeys(l *transport.Layer, m *keys.Manager) *Keys { return &Keys{layer: l, manager: m} }

// Register serves the service on mux behind the layer.
func (h *Keys) Register(mux *http.ServeMux) {
	path, service := ratelimitv1connect.NewKeyServiceHandler(h, h.layer.HandlerOptions(codecs)...)
	mux.Handle(path, route(h.layer, ratelimitv1.File_ratelimit_v1_keys_proto.Services().ByName("KeyService"), service))
}

// errNoKeyStore answers KeyService without MySQL.
var errNoKeyStore = connect.NewError(connect.CodeUnimplemented,
	errors.New("KeyService needs MySQL (UNKEY_MYSQL_DSN), where keys are kept; without it, keys come from UNKEY_AUTH_TOKENS or UNKEY_AUTH_KEYS_FILE"))

// withRequestID gives a changing call a request id, for its audit entry
// and for the caller (the Request-Id header).
func withRequestID[T any](ctx context.Context, resp *connect.Response[T], id string) context.Context {
	resp.Header().Set("Request-Id", id)
	return call.WithRequestID(ctx, id)
}

// CreateKey implements KeyService.CreateKey.
func (h *Keys) CreateKey(ctx context.Context, req *connect.Request[ratelimitv1.CreateKeyRequest]) (*connect.Response[ratelimitv1.CreateKeyResponse], error) {
	if h.manager == nil {
		return nil, errNoKeyStore
	}
	resp := connect.NewResponse(&ratelimitv1.CreateKeyResponse{})
	ctx = withRequestID(ctx, resp, transport.NewRequestID())
	var expires time.Time
	if ms := req.Msg.ExpiresAt; ms != 0 {
		if ms < 0 || ms > maxUnixMs {
			return nil, h.layer.ConnectError(ctx, ratelimitv1connect.KeyServiceCreateKeyProcedure,
				&invalid.Error{Field: "expires_at", Rule: "must be a time in unix ms, or 0 for never"})
		}
		expires = time.UnixMilli(ms)
	}
	k, secret, err := h.manager.Create(ctx, actor(ctx), req.Msg.Name, req.Msg.Permissions, expires)
	if err != nil {
		return nil, h.layer.ConnectError(ctx, ratelimitv1connect.KeyServiceCreateKeyProcedure, err)
	}
	resp.Msg.KeyId, resp.Msg.Key = k.ID, secret
	return resp, nil
}

// maxUnixMs is the year 9999 in unix ms: beyond it a time is nonsense.
const maxUnixMs = 253402300799999

// ListKeys implements KeyService.ListKeys.
func (h *Keys) ListKeys(ctx context.Context, req *connect.Request[ratelimitv1.ListKeysRequest]) (*connect.Response[ratelimitv1.ListKeysResponse], error) {
	if h.manager == nil {
		return nil, errNoKeyStore
	}
	after, err := base64.RawURLEncoding.DecodeString(req.Msg.Cursor)
	if err != nil {
		return nil, h.layer.ConnectError(ctx, ratelimitv1connect.KeyServiceListKeysProcedure,
			&invalid.Error{Field: "cursor", Rule: "must be a cursor from a previous page"})
	}
	page, more, err := h.manager.List(ctx, actor(ctx), string(after), int(req.Msg.Limit))
	if err != nil {
		return nil, h.layer.ConnectError(ctx, ratelimitv1connect.KeyServiceListKeysProcedure, err)
	}
	out := &ratelimitv1.ListKeysResponse{Keys: make([]*ratelimitv1.Key, len(page))}
	for i, k := range page {
		out.Keys[i] = toKey(k)
	}
	if more {
		out.Cursor = base64.RawURLEncoding.EncodeToString([]byte(page[len(page)-1].ID))
	}
	return connect.NewResponse(out), nil
}

// UpdateKey implements KeyService.UpdateKey.
func (h *Keys) UpdateKey(ctx context.Context, req *connect.Request[ratelimitv1.UpdateKeyRequest]) (*connect.Response[ratelimitv1.UpdateKeyResponse], error) {
	if h.manager == nil {
		return nil, errNoKeyStore
	}
	resp := connect.NewResponse(&ratelimitv1.UpdateKeyResponse{})
	ctx = withRequestID(ctx, resp, transport.NewRequestID())
	k, err := h.manager.Update(ctx, actor(ctx), req.Msg.KeyId, req.Msg.Permissions)
	if err != nil {
		return nil, h.layer.ConnectError(ctx, ratelimitv1connect.KeyServiceUpdateKeyProcedure, err)
	}
	resp.Msg.Key = toKey(k)
	return resp, nil
}

// RevokeKey implements KeyService.RevokeKey.
func (h *Keys) RevokeKey(ctx context.Context, req *connect.Request[ratelimitv1.RevokeKeyRequest]) (*connect.Response[ratelimitv1.RevokeKeyResponse], error) {
	if h.manager == nil {
		return nil, errNoKeyStore
	}
	resp := connect.NewResponse(&ratelimitv1.RevokeKeyResponse{})
	ctx = withRequestID(ctx, resp, transport.NewRequestID())
	k, err := h.manager.Revoke(ctx, actor(ctx), req.Msg.KeyId)
	if err != nil {
		return nil, h.layer.ConnectError(ctx, ratelimitv1connect.KeyServiceRevokeKeyProcedure, err)
	}
	resp.Msg.Key = toKey(k)
	return resp, nil
}

func toKey(k keys.Key) *ratelimitv1.Key {
	return &ratelimitv1.Key{KeyId: k.ID, Name: k.Name, Permissions: k.Permissions, ExpiresAt: unixMs(k.ExpiresAt),
		RevokedAt: unixMs(k.RevokedAt), CreatedAt: unixMs(k.CreatedAt), UpdatedAt: unixMs(k.UpdatedAt)}
}

// unixMs is t in unix ms, 0 for the zero time.
func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// actor is who makes the call of ctx, as the keys' manager records it.
func actor(ctx context.Context) keys.Actor {
	return keys.Actor{Principal: call.PrincipalOf(ctx), RequestID: call.RequestID(ctx)}
}
