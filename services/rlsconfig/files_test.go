package rlsconfig

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
)

const good = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"

// TestOnlyRegularFilesAreRead: a FIFO named like a rules file, a link to
// /dev/zero and a file over the cap are refused at once, without blocking
// or reading without end, and the last good configuration stays; once the
// FIFO is gone an edit is applied (before: the FIFO blocked every reload,
// and the link took api rls check to 1.7 GB).
func TestOnlyRegularFilesAreRead(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(dir, WithInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "zz.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan bool)
	go func() { done <- src.Reload() }()
	select {
	case applied := <-done:
		if applied {
			t.Fatal("a directory holding a FIFO was put in force")
		}
	case <-time.After(poll.Scaled(5 * time.Second)):
		t.Fatal("a reload blocked on a FIFO")
	}
	if _, err := LoadPath(dir); err == nil || !strings.Contains(err.Error(), "must be a regular file") {
		t.Fatalf("LoadPath with a FIFO: %v", err)
	}
	os.Remove(fifo)
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(strings.ReplaceAll(good, "requests_per_unit: 1", "requests_per_unit: 7")), 0o644)
	if !src.Reload() {
		t.Fatal("the edit after the FIFO went was not applied")
	}
	if r, ok := src.Config().Match("d", []Entry{{Key: "k", Value: "v"}}); !ok || r.Rule.Limits[0].RequestsPerUnit != 7 {
		t.Fatalf("after the edit: %+v, %v", r, ok)
	}

	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPath(dir); err == nil || !strings.Contains(err.Error(), "must be a regular file") {
		t.Fatalf("LoadPath with a link to /dev/zero: %v", err)
	}
	os.Remove(filepath.Join(dir, "zero.yaml"))
	os.WriteFile(filepath.Join(dir, "big.yaml"), make([]byte, MaxFileBytes+1), 0o644)
	if _, err := LoadPath(dir); err == nil || !strings.Contains(err.Error(), "must be at most 1048576 bytes") {
		t.Fatalf("LoadPath with a file over the cap: %v", err)
	}
}

// TestConfigMapLayout: Kubernetes mounts a ConfigMap as links to files in
// a ..data directory and swaps ..data atomically on a change; a reload
// follows the swap.
func TestConfigMapLayout(t *testing.T) {
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "..2026_11_25_v1"), filepath.Join(dir, "..2026_11_25_v2")
	os.Mkdir(v1, 0o755)
	os.Mkdir(v2, 0o755)
	os.WriteFile(filepath.Join(v1, "rules.yaml"), []byte(good), 0o644)
	os.WriteFile(filepath.Join(v2, "rules.yaml"), []byte(strings.ReplaceAll(good, "requests_per_unit: 1", "requests_per_unit: 9")), 0o644)
	if err := os.Symlink(filepath.Base(v1), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "rules.yaml"), filepath.Join(dir, "rules.yaml")); err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(dir, WithInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet's swap: a new link renamed over ..data.
	if err := os.Symlink(filepath.Base(v2), filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if !src.Reload() {
		t.Fatal("the swapped ConfigMap was not reloaded")
	}
	if r, ok := src.Config().Match("d", []Entry{{Key: "k", Value: "v"}}); !ok || r.Rule.Limits[0].RequestsPerUnit != 9 {
		t.Fatalf("after the swap: %+v, %v", r, ok)
	}
}
