package transport

import (
	"net/http"

	"github.com/unkeyed/ratelimit/services/access"
)

// Operator returns next, a route of the operator's (the process's
// metrics), behind a token of a key that holds status.read: once keys
// exist, every tenant's Envoy descriptor values, workspaces' rule names
// and the process's internals are no caller's to read. An open server
// serves it to anyone, as it serves everything. A refusal is answered in
// JSON, 401 or 403.
func (l *Layer) Operator(next http.Handler) http.Handler {
	render := l.ConnectRenderer()
	return l.recover(render, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pr, err := l.authenticated(access.Authenticate(l.keys, r.Header.Get("Authorization")))
		if err == nil && !pr.Permissions.Has(access.ReadStatus) {
			err = &access.DeniedError{Permission: access.ReadStatus}
		}
		if err != nil {
			render(w, r, err)
			return
		}
		trustConn(r.Context())
		next.ServeHTTP(w, r)
	}))
}
