// Package docs holds the project's reports and its map, ARCHITECTURE.md,
// whose test keeps the map true to the tree.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// codeSpan matches a Markdown code span: what ARCHITECTURE.md names a
// path, a file or an identifier with.
var codeSpan = regexp.MustCompile("`([^`]+)`")

// named returns the code spans of the map.
func named(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// sourceDirs returns the directories of the tree, relative to its root,
// that hold Go files other than tests: the packages and commands. Test
// data, the npm packages and build outputs are not the house.
func sourceDirs(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata", "build":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for d := range seen {
		if d != "." {
			dirs = append(dirs, d)
		}
	}
	slices.Sort(dirs)
	return dirs
}

// TestEveryDirectoryIsOnTheMap: each directory with Go code is named, as
// a path (`dir/` or `dir`), in ARCHITECTURE.md.
func TestEveryDirectoryIsOnTheMap(t *testing.T) {
	spans := named(t)
	for _, dir := range sourceDirs(t, "..") {
		if !slices.Contains(spans, dir+"/") && !slices.Contains(spans, dir) {
			t.Errorf("directory %s is named nowhere in docs/ARCHITECTURE.md: add it to the layout", dir)
		}
	}
}

// TestEveryLimiterFileIsInARoom: each file of the limiter's package and
// of its internal rooms, tests aside, is named in ARCHITECTURE.md: a file
// of the package anywhere, a file of an internal room on a line (a row
// of a table) that names its room's directory, since several rooms have a
// tier.go or a metrics.go.
func TestEveryLimiterFileIsInARoom(t *testing.T) {
	spans := named(t)
	files, err := filepath.Glob("../services/ratelimit/*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		if !slices.Contains(spans, name) && !slices.Contains(spans, "services/ratelimit/"+name) {
			t.Errorf("services/ratelimit/%s is named nowhere in docs/ARCHITECTURE.md: put it in its room", name)
		}
	}
	b, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	inner, err := filepath.Glob("../services/ratelimit/internal/*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range inner {
		name := filepath.Base(f)
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		room := strings.TrimPrefix(filepath.ToSlash(filepath.Dir(f)), "../") + "/"
		if !slices.ContainsFunc(lines, func(l string) bool {
			return strings.Contains(l, "`"+room+"`") && strings.Contains(l, "`"+name+"`")
		}) {
			t.Errorf("%s%s is named on no line of docs/ARCHITECTURE.md that names %s: put it in its room", room, name, room)
		}
	}
}

// TestEveryPathOnTheMapExists: a path the map names (a span with a slash
// that starts at one of the tree's top directories, or a Go file) exists.
func TestEveryPathOnTheMapExists(t *testing.T) {
	top, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	var roots []string
	for _, e := range top {
		if e.IsDir() {
			roots = append(roots, e.Name()+"/")
		}
	}
	goFiles := map[string]bool{}
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".go") {
			goFiles[d.Name()] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, span := range named(t) {
		switch {
		case strings.ContainsAny(span, " *{}<>…"):
			// Not a path: a command, a pattern, a key.
		case strings.Contains(span, "/") && slices.ContainsFunc(roots, func(r string) bool { return strings.HasPrefix(span, r) }):
			if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(span))); err != nil {
				t.Errorf("docs/ARCHITECTURE.md names %s, which does not exist", span)
			}
		case strings.HasSuffix(span, ".go") && !strings.Contains(span, "/"):
			if !goFiles[span] {
				t.Errorf("docs/ARCHITECTURE.md names %s, which is no file of the tree", span)
			}
		}
	}
}
