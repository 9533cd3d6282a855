package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/internal/envconfig"
)

// config is the worker's configuration, read from the environment.
type config struct {
	MySQLDSN   string `env:"UNKEY_MYSQL_DSN,required" help:"the MySQL or MariaDB whose tables the jobs clean: user:password@tcp(host:3306)/db"`
	AdminURL   string `env:"UNKEY_RESTATE_ADMIN_URL" envDefault:"http://127.0.0.1:9070" help:"restate-server's admin API, where the worker registers itself: an http:// or https:// URL"`
	IngressURL string `env:"UNKEY_RESTATE_INGRESS_URL" envDefault:"http://127.0.0.1:8080" help:"restate-server's ingress, through which the worker starts and reads its schedule: an http:// or https:// URL"`
	WorkerAddr string `env:"UNKEY_WORKER_ADDR" envDefault:"127.0.0.1:9080" help:"where the worker serves Restate's handlers (h2c; call the jobs through restate-server's ingress, never here) and /metrics: host:port, loopback unless you say otherwise"`
	// IdentityKeys are the public keys of the restate-servers allowed to
	// call the worker (comma-separated publickeyv1_… keys). Empty: requests
	// are not verified, and the worker warns at start.
	IdentityKeys []string `env:"UNKEY_RESTATE_IDENTITY_KEYS" help:"comma-separated publickeyv1_ keys of the restate-servers allowed to call the worker: with one set, a request restate-server did not sign is answered 401 before any handler runs; empty: not verified, the worker runs what reaches it and warns at start"`
	// IdentityKeyFile names a file of more such keys, one a line (what
	// `worker keygen FILE` writes to FILE.pub).
	IdentityKeyFile string `env:"UNKEY_RESTATE_IDENTITY_KEY_FILE" help:"a file of more such keys, one a line (what worker keygen writes beside the private key, as NAME.pub)"`
	// WorkerURL is where restate-server reaches this worker; by default
	// http://127.0.0.1:<port of UNKEY_WORKER_ADDR>.
	WorkerURL string `env:"UNKEY_WORKER_URL" help:"where restate-server reaches this worker; empty: http://127.0.0.1:<port of UNKEY_WORKER_ADDR>"`
	// AuditRetention is how long the cleanup keeps audit log entries.
	AuditRetention time.Duration `env:"UNKEY_AUDIT_RETENTION" envDefault:"2160h" help:"how long the cleanup keeps audit log entries: at least 1h"`
	cmdutil.Log
	cmdutil.Settings

	mysql *mysql.Config
}

// loadConfig reads the configuration from environ. Errors name the
// variable; an UNKEY_* variable the worker does not read is one, unless
// UNKEY_ALLOW_UNKNOWN_SETTINGS allows it (see cmdutil.Settings).
func loadConfig(environ []string) (config, error) {
	var c config
	if err := envconfig.Parse(environ, &c); err != nil {
		return config{}, err
	}
	if err := c.CheckUnknown(environ, c); err != nil {
		return config{}, err
	}
	if c.AuditRetention < time.Hour {
		return config{}, fmt.Errorf("UNKEY_AUDIT_RETENTION: must be at least 1h, got %s", c.AuditRetention)
	}
	dsn, err := cmdutil.ParseMySQLDSN(c.MySQLDSN)
	if err != nil {
		return config{}, err
	}
	c.mysql = dsn
	for name, v := range map[string]string{"UNKEY_RESTATE_ADMIN_URL": c.AdminURL, "UNKEY_RESTATE_INGRESS_URL": c.IngressURL} {
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return config{}, fmt.Errorf("%s: must be an http:// or https:// URL, got %q", name, v)
		}
	}
	_, port, err := net.SplitHostPort(c.WorkerAddr)
	if err != nil || port == "" {
		return config{}, fmt.Errorf("UNKEY_WORKER_ADDR: must be host:port or :port, got %q", c.WorkerAddr)
	}
	if c.WorkerURL == "" {
		c.WorkerURL = "http://127.0.0.1:" + port
	} else if u, err := url.Parse(c.WorkerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return config{}, fmt.Errorf("UNKEY_WORKER_URL: must be an http:// or https:// URL, got %q", c.WorkerURL)
	}
	for i, key := range c.IdentityKeys {
		c.IdentityKeys[i] = strings.TrimSpace(key)
		if !strings.HasPrefix(c.IdentityKeys[i], "publickeyv1_") {
			return config{}, fmt.Errorf("UNKEY_RESTATE_IDENTITY_KEYS: entry %d must be a publickeyv1_… key (worker keygen prints one), got %q", i+1, key)
		}
	}
	if c.IdentityKeyFile != "" {
		raw, err := os.ReadFile(c.IdentityKeyFile)
		if err != nil {
			return config{}, fmt.Errorf("UNKEY_RESTATE_IDENTITY_KEY_FILE: %w", err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			if line = strings.TrimSpace(line); line == "" {
				continue
			}
			if !strings.HasPrefix(line, "publickeyv1_") {
				return config{}, fmt.Errorf("UNKEY_RESTATE_IDENTITY_KEY_FILE: line %d must be a publickeyv1_… key", i+1)
			}
			c.IdentityKeys = append(c.IdentityKeys, line)
		}
	}
	if err := c.Log.Validate(); err != nil {
		return config{}, err
	}
	return c, nil
}
