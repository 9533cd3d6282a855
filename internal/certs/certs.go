// Package certs serves a server's TLS certificate from PEM files, read
// again when they change (cert-manager renews a Secret in place), with the
// certificate's expiry as a metric; with a client CA, mutual TLS.
package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Files names the PEM files of a server's certificate and key and, for
// mutual TLS, of the CA whose certificates its clients must present.
type Files struct {
	Cert, Key string
	// ClientCA, if set, turns on mutual TLS: a client without a
	// certificate this CA signed fails the handshake.
	ClientCA string
}

// certCheckEvery is how often, at most, a handshake looks at the files
// for a change: a rotated certificate (cert-manager renews it in place)
// is served to new connections within a second, without a restart.
const certCheckEvery = time.Second

// Certificates serves the certificate of a Files to every new
// connection, read again when the files change. A change that does not
// load (a pair written half, a key that does not match) keeps the last good
// certificate and is logged. Its methods are safe for concurrent use.
type Certificates struct {
	files  Files
	logger *slog.Logger
	// expiry is the NotAfter of the certificate in force, in unix
	// seconds, for an alert well before it passes.
	expiry prometheus.Gauge

	config atomic.Pointer[tls.Config]
	// looking is held by the one handshake that looks at the files; the
	// others go on with config meanwhile, so a file system that hangs holds
	// up one connection, not all.
	looking sync.Mutex
	checked time.Time // the latest look at the files, under looking
	seen    string    // what that look found, under looking
}

// Load reads files now, and registers the expiry of the
// certificate in force with reg; an error names what is wrong with them. A
// certificate that has expired is served all the same (clients refuse it;
// a renewed one is served as soon as it is written), and logged at error
// level.
func Load(files Files, logger *slog.Logger, reg prometheus.Registerer) (*Certificates, error) {
	c := &Certificates{files: files, logger: logger, expiry: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "unkey_tls_certificate_expiry_timestamp_seconds",
		Help: "When the server certificate in force expires, in unix seconds: alert well before it passes (clients refuse an expired certificate).",
	})}
	if err := reg.Register(c.expiry); err != nil {
		return nil, fmt.Errorf("register TLS metrics: %w", err)
	}
	cfg, err := c.load()
	if err != nil {
		return nil, err
	}
	c.inForce(cfg)
	c.config.Store(cfg)
	c.seen, c.checked = c.look(), time.Now()
	return c, nil
}

// Config returns the TLS configuration of a server: TLS 1.2 or later,
// HTTP/2 and HTTP/1.1 by ALPN, and each connection's certificate (and
// client CA) as the files hold them then.
func (c *Certificates) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.current(), nil
		},
	}
}

// current returns the configuration of the files, reloading it if they
// changed since the last look (at most once per certCheckEvery).
func (c *Certificates) current() *tls.Config {
	cfg := c.config.Load()
	if !c.looking.TryLock() {
		return cfg // another handshake is looking
	}
	defer c.looking.Unlock()
	if time.Since(c.checked) < certCheckEvery {
		return cfg
	}
	c.checked = time.Now()
	look := c.look()
	if look == c.seen {
		return cfg
	}
	next, err := c.load()
	if err != nil {
		c.logger.LogAttrs(context.Background(), slog.LevelError, "TLS certificate files changed but do not load; serving the last good certificate",
			slog.String("error", err.Error()))
		return cfg // and look again next time: the writer may not be done
	}
	c.seen = look
	c.inForce(next)
	c.config.Store(next)
	c.logger.Info("TLS certificate reloaded", "cert", c.files.Cert)
	return next
}

// expiryWarning is how long before its expiry a certificate put in force
// is logged as about to expire: cert-manager renews at two thirds of a
// certificate's life, so one this close to its end was not renewed.
const expiryWarning = 7 * 24 * time.Hour

// inForce records the expiry of cfg's certificate, logging one that has
// expired or is about to.
func (c *Certificates) inForce(cfg *tls.Config) {
	leaf := cfg.Certificates[0].Leaf
	if leaf == nil {
		return
	}
	c.expiry.Set(float64(leaf.NotAfter.Unix()))
	switch left := time.Until(leaf.NotAfter); {
	case left <= 0:
		c.logger.Error("the TLS certificate has expired: clients refuse it until a renewed one is written",
			"cert", c.files.Cert, "not_after", leaf.NotAfter)
	case left < expiryWarning:
		c.logger.Warn("the TLS certificate expires soon", "cert", c.files.Cert, "not_after", leaf.NotAfter)
	}
}

// look describes the files by size, modification time and inode (links
// followed, as a Kubernetes Secret's files are links swapped at once).
func (c *Certificates) look() string {
	out := ""
	for _, name := range []string{c.files.Cert, c.files.Key, c.files.ClientCA} {
		if name == "" {
			continue
		}
		fi, err := os.Stat(name)
		if err != nil {
			out += name + ":missing;"
			continue
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		out += fmt.Sprintf("%s:%d:%d:%d;", name, fi.Size(), fi.ModTime().UnixNano(), ino)
	}
	return out
}

// load reads the files into a server configuration.
func (c *Certificates) load() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(c.files.Cert, c.files.Key)
	if err != nil {
		return nil, fmt.Errorf("load the TLS certificate and key: %w", err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
		Certificates: []tls.Certificate{pair},
	}
	if c.files.ClientCA != "" {
		pool, err := ReadPool(c.files.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("read the client CA: %w", err)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ReadPool reads the PEM certificates of file, CAs to trust, into a pool.
// A file without one is an error: trusting nobody is never meant.
func ReadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}
