package command

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/audit"
	auditmysql "github.com/unkeyed/ratelimit/services/audit/mysqlstore"
	"github.com/unkeyed/ratelimit/services/keys"
	keysmysql "github.com/unkeyed/ratelimit/services/keys/mysqlstore"
)

// keysUsage is the help of the keys subcommands.
const keysUsage = `usage:
  api keys create --workspace W --name N --permissions P1,P2 [--expires-at RFC3339]
      create a key in the MySQL of UNKEY_MYSQL_DSN (how an operator gets the first
      one); prints {"keyId":…,"key":…} as its last line: the only time the key is shown
  api keys generate --workspace W --name N --permissions P1,P2 [--expires-at RFC3339]
      generate a key for UNKEY_AUTH_KEYS_FILE without touching any database: prints
      the entry to add to the file's "keys", then {"keyId":…,"key":…} as its last line`

// Keys runs "api keys ARGS..." with the settings in environ, writing its
// answer to out and its log to logOut.
func Keys(ctx context.Context, environ []string, out, logOut io.Writer, args []string) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "generate") {
		return fmt.Errorf("keys: %s", keysUsage)
	}
	fs := flag.NewFlagSet("api keys "+args[0], flag.ContinueOnError)
	fs.SetOutput(logOut)
	workspace := fs.String("workspace", "", "the key's workspace")
	name := fs.String("name", "", "what the key is for")
	perms := fs.String("permissions", "", "comma-separated permissions, e.g. ratelimit.*.limit,ratelimit.api.set_override")
	expires := fs.String("expires-at", "", "when the key stops working, RFC 3339 (default: never)")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("keys %s: %w", args[0], err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("keys %s: unexpected arguments %q", args[0], fs.Args())
	}
	if *workspace == "" || len(*workspace) > access.MaxWorkspaceLength || !access.Printable(*workspace) {
		return fmt.Errorf("keys %s: --workspace: must be 1 to %d printable characters", args[0], access.MaxWorkspaceLength)
	}
	var permissions []string
	for _, p := range strings.Split(*perms, ",") {
		if p = strings.TrimSpace(p); p != "" {
			permissions = append(permissions, p)
		}
	}
	var expiresAt time.Time
	if *expires != "" {
		t, err := time.Parse(time.RFC3339, *expires)
		if err != nil {
			return fmt.Errorf("keys %s: --expires-at: must be an RFC 3339 time such as 2027-01-31T00:00:00Z", args[0])
		}
		expiresAt = t
	}
	if err := keys.Validate(*name, permissions, expiresAt, time.Now()); err != nil {
		var ve *invalid.Error
		if errors.As(err, &ve) { // name the flag, not the API's field
			return fmt.Errorf("keys %s: --%s: %s", args[0], strings.ReplaceAll(ve.Field, "_", "-"), ve.Rule)
		}
		return fmt.Errorf("keys %s: %w", args[0], err)
	}
	if args[0] == "generate" {
		return generateKey(out, *workspace, *name, permissions, expiresAt)
	}
	return createKey(ctx, environ, out, logOut, *workspace, *name, permissions, expiresAt)
}

// created is the last line of both commands.
type created struct {
	KeyID string `json:"keyId"`
	Key   string `json:"key"`
}

// createKey writes a key straight to MySQL, recording it in the audit log
// as made by the actor "cli".
func createKey(ctx context.Context, environ []string, out, logOut io.Writer, workspace, name string, permissions []string, expiresAt time.Time) error {
	sqlDB, _, err := openMySQL(environ, "keys create", "; without MySQL, use api keys generate and UNKEY_AUTH_KEYS_FILE")
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := audit.NewWriter(auditmysql.New(sqlDB), slog.New(slog.NewTextHandler(logOut, nil)), prometheus.NewRegistry())
	if err != nil {
		return err
	}
	cli := keys.Actor{Principal: access.Principal{Workspace: workspace, Permissions: access.All(), KeyID: "cli"}}
	k, secret, err := keys.NewManager(keysmysql.New(sqlDB), w).Create(ctx, cli, name, permissions, expiresAt)
	if err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	fmt.Fprintf(logOut, "created key %s (%s) in workspace %s; every API process takes it within its poll interval\n", k.ID, k.Name, k.Workspace)
	return json.NewEncoder(out).Encode(created{KeyID: k.ID, Key: secret})
}

// generateKey prints a new key's entry for a keys file, then the key.
func generateKey(out io.Writer, workspace, name string, permissions []string, expiresAt time.Time) error {
	secret, digest := keys.Generate()
	entry := keys.Entry(keys.Key{ID: keys.NewID(), Name: name, Workspace: workspace, Digest: digest,
		Permissions: permissions, ExpiresAt: expiresAt})
	enc := json.NewEncoder(out)
	if err := enc.Encode(entry); err != nil {
		return err
	}
	return enc.Encode(created{KeyID: entry.ID, Key: secret})
}
