package connectapi

import "github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"

// Services names the gRPC service each handler serves, and Routes the
// HTTP routes it serves besides them (none): what the server's health,
// reflection and the answer to an unknown path list.

// Services returns RatelimitService.
func (h *Handler) Services() []string { return []string{ratelimitv1connect.RatelimitServiceName} }

// Routes returns none: the service is its RPCs.
func (h *Handler) Routes() string { return "" }

// Services returns KeyService.
func (h *Keys) Services() []string { return []string{ratelimitv1connect.KeyServiceName} }

// Routes returns none.
func (h *Keys) Routes() string { return "" }

// Services returns AuditService.
func (h *Audit) Services() []string { return []string{ratelimitv1connect.AuditServiceName} }

// Routes returns none.
func (h *Audit) Routes() string { return "" }

// Services returns AnalyticsService.
func (h *Analytics) Services() []string { return []string{ratelimitv1connect.AnalyticsServiceName} }

// Routes returns none.
func (h *Analytics) Routes() string { return "" }
