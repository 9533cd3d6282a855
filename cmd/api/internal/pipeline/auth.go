package pipeline

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
)

// OpenWorkspace is every caller's workspace when no tokens are configured.
const OpenWorkspace = "default"

// MinTokenLength is the shortest bearer token accepted: 16 characters of a
// random token are at least 80 bits even in a small alphabet, beyond
// guessing over the network.
const MinTokenLength = 16

// maxWorkspaceLength is the width of the stores' workspace_id columns.
const maxWorkspaceLength = 191

// The two ways authentication fails. Adapters word them for their
// protocol; both are KindUnauthenticated.
var (
	ErrMissingToken = errors.New("missing bearer token: send an Authorization: Bearer <token> header")
	ErrUnknownToken = errors.New("unknown bearer token")
)

// Tokens maps the SHA-256 of a bearer token to its workspace. Hashing first
// makes the lookup take the same time whatever prefix of a token a caller
// guesses.
type Tokens map[[sha256.Size]byte]string

// Workspace returns the workspace of token, if it is known.
func (t Tokens) Workspace(token string) (string, bool) {
	ws, ok := t[sha256.Sum256([]byte(token))]
	return ws, ok
}

// ParseTokens parses comma-separated token=workspace_id entries. An entry
// splits at its last "=", since workspace ids never hold one and base64
// tokens may end in "=" padding.
func ParseTokens(s string) (Tokens, error) {
	t := Tokens{}
	if strings.TrimSpace(s) == "" {
		return t, nil
	}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		cut := strings.LastIndexByte(entry, '=')
		if cut <= 0 || cut == len(entry)-1 {
			return nil, fmt.Errorf("entry %d must be token=workspace_id", i+1)
		}
		token, ws := entry[:cut], entry[cut+1:]
		if len(token) < MinTokenLength {
			return nil, fmt.Errorf("entry %d: token must be at least %d characters, got %d", i+1, MinTokenLength, len(token))
		}
		if len(ws) > maxWorkspaceLength || !Printable(ws) {
			return nil, fmt.Errorf("entry %d: workspace must be 1 to %d printable characters", i+1, maxWorkspaceLength)
		}
		sum := sha256.Sum256([]byte(token))
		if _, dup := t[sum]; dup {
			return nil, fmt.Errorf("entry %d repeats a token", i+1)
		}
		t[sum] = ws
	}
	return t, nil
}

// Printable reports whether s is non-empty printable ASCII without spaces.
func Printable(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// Authenticate resolves the workspace of a request from its authorization
// header (or gRPC metadata entry), "Bearer <token>". With no tokens
// configured every caller is in OpenWorkspace. The workspace is never taken
// from a request body, so one workspace can never read or spend another's
// counters. It fails with ErrMissingToken or ErrUnknownToken.
func (p *Pipeline) Authenticate(authorization string) (string, error) {
	if len(p.tokens) == 0 {
		return OpenWorkspace, nil
	}
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || token == "" {
		return "", ErrMissingToken
	}
	ws, ok := p.tokens.Workspace(token)
	if !ok {
		return "", ErrUnknownToken
	}
	return ws, nil
}

// Open reports whether the pipeline runs without tokens.
func (p *Pipeline) Open() bool { return len(p.tokens) == 0 }

type workspaceKey struct{}

// WithWorkspace returns ctx carrying the workspace Authenticate resolved,
// for the handlers behind an adapter's authenticating middleware.
func WithWorkspace(ctx context.Context, ws string) context.Context {
	return context.WithValue(ctx, workspaceKey{}, ws)
}

// Workspace returns the workspace WithWorkspace put in ctx.
func Workspace(ctx context.Context) string {
	ws, _ := ctx.Value(workspaceKey{}).(string)
	return ws
}
