package rlsconfig

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Bounds of what a configuration path may hold. envoyproxy/ratelimit's
// files are kilobytes; these keep a file put there by mistake (a log, a
// dump, a link to /dev/zero) from taking the process's memory or its
// reload loop.
const (
	// MaxFileBytes bounds one file.
	MaxFileBytes = 1 << 20
	// MaxTotalBytes bounds the files of a directory together.
	MaxTotalBytes = 4 << 20
)

// ReadPath reads the configuration files at path: the file itself, or
// every .yaml and .yml file of the directory (not its subdirectories, and
// not hidden files such as editors' swap files, or Kubernetes' ..data), in
// name order. Only regular files are read (links are followed, as
// Kubernetes publishes a ConfigMap's files through them): a FIFO, a device
// or a socket is refused, never opened for a read that could block, and so
// is a file over MaxFileBytes or files over MaxTotalBytes together.
func ReadPath(path string) ([]File, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read rate limit config: %w", err)
	}
	if !info.IsDir() {
		data, err := readFile(path)
		if err != nil {
			return nil, fmt.Errorf("read rate limit config: %w", err)
		}
		return []File{{Name: path, Data: data}}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("read rate limit config: %w", err)
	}
	var files []File
	total := 0
	for _, e := range entries {
		name := e.Name()
		if !configName(name) {
			continue
		}
		full := filepath.Join(path, name)
		// Stat follows symlinks, as configuration managers (Kubernetes
		// ConfigMaps among them) publish files through them. A file that
		// cannot be looked at (a dangling link, one replaced this moment)
		// fails the read, rather than a configuration without its rules
		// being put in force.
		fi, err := os.Stat(full)
		if err != nil {
			return nil, fmt.Errorf("read rate limit config: %w", err)
		}
		if fi.IsDir() {
			continue
		}
		data, err := readFile(full)
		if err != nil {
			return nil, fmt.Errorf("read rate limit config: %w", err)
		}
		if total += len(data); total > MaxTotalBytes {
			return nil, fmt.Errorf("read rate limit config: the files of %s must be at most %d bytes together", path, MaxTotalBytes)
		}
		files = append(files, File{Name: full, Data: data})
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

// LoadPath reads and compiles the configuration at path (see ReadPath).
func LoadPath(path string) (*Config, error) {
	files, err := ReadPath(path)
	if err != nil {
		return nil, err
	}
	return Load(files...)
}

// readFile reads a regular file of at most MaxFileBytes. It opens without
// blocking (a FIFO's open would wait for a writer), then checks what it
// opened, so that a file swapped for a FIFO between a look and the open is
// refused too.
func readFile(name string) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: must be a regular file, is %s", name, info.Mode().Type())
	}
	if info.Size() > MaxFileBytes {
		return nil, fmt.Errorf("%s: must be at most %d bytes, is %d", name, MaxFileBytes, info.Size())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s: must be at most %d bytes", name, MaxFileBytes)
	}
	return data, nil
}

// configName reports whether a directory entry is a configuration file by
// its name: .yaml or .yml, and not hidden.
func configName(name string) bool {
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}
