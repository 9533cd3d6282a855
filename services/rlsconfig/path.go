package rlsconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ReadPath reads the configuration files at path: the file itself, or
// every .yaml and .yml file of the directory (not its subdirectories, and
// not hidden files such as editors' swap files), in name order.
func ReadPath(path string) ([]File, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read rate limit config: %w", err)
	}
	if !info.IsDir() {
		data, err := os.ReadFile(path)
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
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		full := filepath.Join(path, name)
		// Stat follows symlinks, as configuration managers (Kubernetes
		// ConfigMaps among them) publish files through them.
		if fi, err := os.Stat(full); err != nil || fi.IsDir() {
			continue
		}
		data, err := os.ReadFile(full)
		if err != nil {
			return nil, fmt.Errorf("read rate limit config: %w", err)
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
