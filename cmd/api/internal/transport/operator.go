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

// IsOperator reports whether r carries a token that holds status.read,
// the operator's permission (on a server without keys, any token): a
// route that answers anyone (a probe) tells such a caller more (an
// address of the deployment's own). A request without a token is no
// operator's, on any server.
func (l *Layer) IsOperator(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return false
	}
	pr, err := l.authenticated(access.Authenticate(l.keys, auth))
	return err == nil && pr.Permissions.Has(access.ReadStatus)
}
