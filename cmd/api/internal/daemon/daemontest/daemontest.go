// Package daemontest starts the API as package daemon builds it, on
// loopback ports, for black-box tests: of the whole server beside the
// root, and of each protocol's adapter beside its package. One root builds
// every process the tests call, so a test sees the routes, bounds, keys and
// loops production has.
package daemontest

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/services/keys"
)

// Server is one API process on loopback.
type Server struct {
	*daemon.Daemon
	// URL is the main port's, http://127.0.0.1:port.
	URL string
	// GRPCAddr is the grpc-go port's address, with UNKEY_GRPC_ADDR set.
	GRPCAddr string
	// Close stops the server gracefully and returns what Serve returned;
	// it is safe to call twice, and the test's end calls it.
	Close func() error
}

// Start builds the API from environ (with UNKEY_REGION=test unless environ
// sets a region; UNKEY_GRPC_ADDR=127.0.0.1:0 serves the grpc-go port on a
// free one), logging to logger (nil: nowhere), serves it until the test
// ends, and returns once it reports ready. A configuration the daemon
// refuses fails the test.
func Start(t testing.TB, logger *slog.Logger, environ ...string) *Server {
	t.Helper()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := daemon.LoadConfig(append([]string{"UNKEY_REGION=test"}, environ...))
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Daemon: d, URL: "http://" + ln.Addr().String()}
	var grpcLn net.Listener
	if cfg.GRPCAddr != "" {
		if grpcLn, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
			t.Fatal(err)
		}
		s.GRPCAddr = grpcLn.Addr().String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, ln, grpcLn) }()
	s.Close = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	// Serve takes traffic once its listener is open, and reports ready once
	// the overrides and keys are loaded: the tests start from a ready
	// server, not from whichever came first.
	poll.Until(t, 30*time.Second, "the server to report ready", d.Ready)
	return s
}

// Key is a key of a keys file: its secret (at least 16 characters), its
// workspace and its permissions (as package access names them).
type Key struct {
	Secret      string
	Workspace   string
	Permissions []string
}

// KeysFile writes a keys file (UNKEY_AUTH_KEYS_FILE) holding ks in a
// directory the test removes, and returns its path.
func KeysFile(t testing.TB, ks ...Key) string {
	t.Helper()
	var f struct {
		Keys []keys.FileEntry `json:"keys"`
	}
	for _, k := range ks {
		f.Keys = append(f.Keys, keys.Entry(keys.Key{ID: keys.NewID(), Name: "test", Workspace: k.Workspace,
			Digest: keys.DigestOf(k.Secret), Permissions: k.Permissions}))
	}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
