package keys

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	json "github.com/go-json-experiment/json"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/internal/reread"
	"github.com/unkeyed/ratelimit/services/access"
)

// MaxFileSize bounds a keys file: a million keys' digests and
// permissions fit well within it.
const MaxFileSize = 64 << 20

// DefaultFileInterval is how often a File reads its file (which is small:
// one read and one digest a second cost nothing measurable).
const DefaultFileInterval = time.Second

// fileFormat is a keys file, JSON:
//
//	{"keys": [{"id": "key_1", "name": "gateway", "workspace": "ws_1",
//	  "digest": "sha256:<64 hex digits>", "permissions": ["ratelimit.*.limit"],
//	  "expiresAt": "2027-01-01T00:00:00Z"}]}
//
// expiresAt is optional. A key leaves the file to be revoked.
type fileFormat struct {
	Keys []FileEntry `json:"keys"`
}

// FileEntry is one key of a keys file, as api keys generate prints it.
type FileEntry struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Workspace   string    `json:"workspace"`
	Digest      string    `json:"digest"`
	Permissions []string  `json:"permissions"`
	ExpiresAt   time.Time `json:"expiresAt,omitzero"`
}

// ParseFile parses a keys file's contents into its keys. It fails naming
// the first key and field that break a rule; a file is taken whole or not
// at all.
func ParseFile(data []byte) ([]Key, error) {
	var f fileFormat
	if err := json.Unmarshal(data, &f, json.RejectUnknownMembers(true)); err != nil {
		return nil, fmt.Errorf("not a keys file: %w", err)
	}
	out := make([]Key, 0, len(f.Keys))
	ids := make(map[string]bool, len(f.Keys))
	digests := make(map[Digest]bool, len(f.Keys))
	for i, fk := range f.Keys {
		k, err := fk.key()
		if err != nil {
			return nil, fmt.Errorf("keys[%d]: %w", i, err)
		}
		if ids[k.ID] {
			return nil, fmt.Errorf("keys[%d].id: %q is given twice", i, k.ID)
		}
		if digests[k.Digest] {
			return nil, fmt.Errorf("keys[%d].digest: is given twice", i)
		}
		ids[k.ID], digests[k.Digest] = true, true
		out = append(out, k)
	}
	return out, nil
}

// Entry returns k as a keys file holds it.
func Entry(k Key) FileEntry {
	var expires time.Time
	if !k.ExpiresAt.IsZero() {
		expires = k.ExpiresAt.UTC()
	}
	return FileEntry{ID: k.ID, Name: k.Name, Workspace: k.Workspace, Digest: k.Digest.String(),
		Permissions: k.Permissions, ExpiresAt: expires}
}

// key checks one key of a file.
func (fk FileEntry) key() (Key, error) {
	if fk.ID == "" || len(fk.ID) > MaxIDLength || !access.Printable(fk.ID) {
		return Key{}, fmt.Errorf("id: must be 1 to %d printable characters", MaxIDLength)
	}
	if fk.Workspace == "" || len(fk.Workspace) > access.MaxWorkspaceLength || !access.Printable(fk.Workspace) {
		return Key{}, fmt.Errorf("workspace: must be 1 to %d printable characters", access.MaxWorkspaceLength)
	}
	hexDigest, ok := strings.CutPrefix(fk.Digest, "sha256:")
	var d Digest
	if n, err := hex.Decode(d[:], []byte(hexDigest)); !ok || err != nil || n != len(d) || len(hexDigest) != 2*len(d) {
		return Key{}, errors.New(`digest: must be "sha256:" and the 64 hex digits of the key's SHA-256`)
	}
	if err := Validate(fk.Name, fk.Permissions, time.Time{}, time.Time{}); err != nil {
		return Key{}, err
	}
	return Key{ID: fk.ID, Name: fk.Name, Workspace: fk.Workspace, Digest: d,
		Permissions: fk.Permissions, ExpiresAt: fk.ExpiresAt}, nil
}

// File keeps a Ring's keys in step with a keys file (UNKEY_AUTH_KEYS_FILE):
// a Kubernetes Secret mounted as a file, which the kubelet replaces
// whole. A change that does not parse is logged and counted, and the keys
// last read stay in force.
type File struct {
	path     string
	interval time.Duration
	logger   *slog.Logger
	ring     *Ring
	seen     [sha256.Size]byte // digest of the contents last read
	loads    *prometheus.CounterVec
}

// FileOption configures a File.
type FileOption func(*File)

// WithFileLogger sets the logger of reloads and refused files.
func WithFileLogger(l *slog.Logger) FileOption { return func(f *File) { f.logger = l } }

// WithFileRegisterer registers the file's metrics with reg.
func WithFileRegisterer(reg prometheus.Registerer) FileOption {
	return func(f *File) { f.loads = newLoads(reg) }
}

// newLoads is the counter of a File's reads, registered with reg.
func newLoads(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "unkey_auth_keys_file_loads_total",
		Help: "Reads of UNKEY_AUTH_KEYS_FILE that found a change, by result: ok (in force now) or error (refused; the keys last read stay).",
	}, []string{"result"})
	if reg != nil {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return are.ExistingCollector.(*prometheus.CounterVec)
			}
		}
	}
	return c
}

// NewFile reads the keys file at path and puts its keys in force in ring.
// A file that cannot be read or parsed at start is an error: a service
// must not start without the keys it was given.
func NewFile(path string, ring *Ring, opts ...FileOption) (*File, error) {
	f := &File{path: path, interval: DefaultFileInterval, logger: slog.New(slog.DiscardHandler), ring: ring}
	for _, o := range opts {
		o(f)
	}
	if f.loads == nil {
		f.loads = newLoads(nil)
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	if err := f.apply(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// readFile reads a keys file, at most MaxFileSize.
func readFile(path string) ([]byte, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: must be at most %d MiB", path, MaxFileSize>>20)
	}
	return data, nil
}

// apply parses data and puts it in force.
func (f *File) apply(data []byte) error {
	f.seen = sha256.Sum256(data)
	keys, err := ParseFile(data)
	if err != nil {
		f.loads.WithLabelValues("error").Inc()
		return err
	}
	set, errs := NewSet(keys)
	if len(errs) > 0 { // ParseFile checked every permission
		return errors.Join(errs...)
	}
	f.ring.setFile(set)
	f.loads.WithLabelValues("ok").Inc()
	return nil
}

// Run reads the file every interval until ctx ends and puts changed keys in
// force (see package reread: a read that hangs delays neither the next one
// once it returns nor the end of Run).
func (f *File) Run(ctx context.Context) error {
	reread.Every(ctx, f.interval, func() { f.Reload() })
	return nil
}

// Reload reads the file once and puts its keys in force if it changed and
// parses. It reports whether new keys are in force.
func (f *File) Reload() bool {
	data, err := readFile(f.path)
	if err != nil {
		// A file being replaced can be missing for a moment; the next
		// read sees the new one.
		f.logger.Warn("keys file: could not read; the keys last read stay in force", "path", f.path, "error", err)
		return false
	}
	if sum := sha256.Sum256(data); bytes.Equal(sum[:], f.seen[:]) {
		return false
	}
	if err := f.apply(data); err != nil {
		f.logger.Error("keys file refused; the keys last read stay in force", "path", f.path, "error", err)
		return false
	}
	f.logger.Info("keys file reloaded", "path", f.path, "keys", f.ring.file.Load().Len())
	return true
}
