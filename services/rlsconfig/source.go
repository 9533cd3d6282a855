package rlsconfig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/internal/reread"
)

// DefaultInterval is how often a Source looks at its files (a stat each;
// they are read again only when one changed): changes take effect within
// about a second, at no measurable cost.
const DefaultInterval = time.Second

// Source holds the configuration in force and keeps it in step with the
// files at its path. A change that does not compile is logged and counted,
// and the last good configuration stays in force.
type Source struct {
	path     string
	interval time.Duration
	logger   *slog.Logger
	reg      prometheus.Registerer

	current atomic.Pointer[Config]
	// seen is the fingerprint of the files last read, good or not, so a
	// broken file is reported once, not every interval; looked is what a
	// look at their names, sizes and times found, so that unchanged files
	// are not read and hashed every interval. Only Reload touches them,
	// one at a time.
	seen   [sha256.Size]byte
	looked string

	loads *loadCounters
	// compiler compiles the files.
	compiler Compiler
}

// Option configures a Source.
type Option func(*Source)

// WithInterval sets how often the files are looked at (DefaultInterval).
func WithInterval(d time.Duration) Option { return func(s *Source) { s.interval = d } }

// WithCompiler sets how the files are compiled (within DefaultBounds,
// units as lengths): files past its bounds are refused naming the bound.
func WithCompiler(c Compiler) Option { return func(s *Source) { s.compiler = c } }

// WithLogger sets the logger of reloads and refused files.
func WithLogger(l *slog.Logger) Option { return func(s *Source) { s.logger = l } }

// WithRegisterer registers the source's metrics with reg.
func WithRegisterer(reg prometheus.Registerer) Option { return func(s *Source) { s.reg = reg } }

// NewSource reads and compiles the configuration at path. A configuration
// that does not compile at start is an error: a service must not start
// without the limits it was given.
func NewSource(path string, opts ...Option) (*Source, error) {
	s := &Source{path: path, interval: DefaultInterval, logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(s)
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	var err error
	s.loads, err = registerLoads(s.reg, "Reads of the rate limit configuration files that found a change, by result: ok (in force now) or error (refused; the last good configuration stays).", s.Config)
	if err != nil {
		return nil, err
	}
	files, err := ReadPath(path)
	if err != nil {
		return nil, err
	}
	c, err := s.compiler.Load(files...)
	if err != nil {
		return nil, err
	}
	s.current.Store(c)
	s.seen = fingerprint(files)
	s.loads.ok()
	return s, nil
}

// Config returns the configuration in force. It never returns nil.
func (s *Source) Config() *Config { return s.current.Load() }

// Run looks at the files every interval until ctx ends, and puts a changed
// configuration in force (see package reread: a read that hangs delays
// neither the next look once it returns nor the end of Run).
func (s *Source) Run(ctx context.Context) error {
	reread.Every(ctx, s.interval, func() { s.Reload() })
	return nil
}

// Reload reads the files once and puts them in force if they changed and
// compile. It reports whether a new configuration is in force. Files whose
// names, sizes, modification times and inodes did not change since the
// last Reload are not read again.
func (s *Source) Reload() bool {
	look, lookErr := lookAt(s.path)
	if lookErr == nil && look == s.looked {
		return false
	}
	files, err := ReadPath(s.path)
	if err != nil {
		// A file being replaced can be missing for a moment; the next
		// read sees the new one.
		s.logger.Warn("rate limit config: could not read; the last good config stays in force", "path", s.path, "error", err)
		return false
	}
	if lookErr == nil {
		s.looked = look // read: the next look compares with it
	}
	fp := fingerprint(files)
	if bytes.Equal(fp[:], s.seen[:]) {
		return false
	}
	s.seen = fp
	c, err := s.compiler.Load(files...)
	if err != nil {
		s.loads.failed()
		s.logger.Error("rate limit config refused; the last good config stays in force", "path", s.path, "error", err)
		return false
	}
	s.current.Store(c)
	s.loads.ok()
	domains, rules := c.Domains()
	s.logger.Info("rate limit config reloaded", "path", s.path, "domains", domains, "rules", rules)
	return true
}

// fingerprint digests the files' names and contents, in order.
func fingerprint(files []File) [sha256.Size]byte {
	d := newDigester()
	for _, f := range files {
		d.add([]byte(f.Name))
		d.add(f.Data)
	}
	return d.sum()
}

// lookAt describes the files ReadPath would read at path by their names,
// sizes, modification times and inodes (links followed), without opening
// them.
func lookAt(path string) (string, error) {
	var b strings.Builder
	add := func(name string, fi os.FileInfo) {
		var ino uint64 // a file swapped in by a link has another inode
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(&b, "%s\x00%d\x00%d\x00%s\x00%d\n", name, fi.Size(), fi.ModTime().UnixNano(), fi.Mode(), ino)
	}
	info, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !info.IsDir() {
		add(path, info)
		return b.String(), nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		name := e.Name()
		if !configName(name) {
			continue
		}
		fi, err := os.Stat(filepath.Join(path, name))
		if err != nil {
			return "", err
		}
		add(name, fi)
	}
	return b.String(), nil
}
