package docs

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// link matches a Markdown link or image: its text and its target.
var link = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]+)\)`)

// heading matches an ATX heading: its text.
var heading = regexp.MustCompile(`^#{1,6} +(.+?) *#*$`)

// markdown is one Markdown file of the repository, read: its prose (its
// fenced blocks and code spans left out, where a bracket is no link) and
// the anchors its headings make.
type markdown struct {
	prose   []string // a line each, numbered from 1 by index+1
	anchors map[string]bool
}

// readMarkdown reads the Markdown file at name, relative to the
// repository's root.
func readMarkdown(t *testing.T, name string) markdown {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	md := markdown{anchors: map[string]bool{}}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			md.prose = append(md.prose, "")
			continue
		}
		if inFence {
			md.prose = append(md.prose, "")
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			a := slug(m[1])
			if n := seen[a]; n > 0 {
				md.anchors[a+"-"+strconv.Itoa(n)] = true
			} else {
				md.anchors[a] = true
			}
			seen[a]++
		}
		md.prose = append(md.prose, codeSpan.ReplaceAllString(line, "``"))
	}
	return md
}

// slug is the anchor GitHub gives a heading: its text in lower case,
// without the characters that are neither letters, digits, spaces,
// hyphens nor underscores (a code span's backquotes included), its spaces
// hyphens.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// pages are the Markdown files a reader moves between: README.md, the
// changelog, the Envoy example's and every page of docs/.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"README.md", "CHANGELOG.md", "examples/envoy/README.md"}
	found, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		out = append(out, "docs/"+f)
	}
	return out
}

// TestLinks: every relative link of README.md, CHANGELOG.md and the pages
// of docs/ leads to a file of the repository, and one with an anchor to a
// heading of that page that makes it; every page of docs/ is linked from
// README.md, so that a newcomer reaches it from the front page.
func TestLinks(t *testing.T) {
	read := map[string]markdown{}
	get := func(name string) markdown {
		md, ok := read[name]
		if !ok {
			md = readMarkdown(t, name)
			read[name] = md
		}
		return md
	}
	linkedFromReadme := map[string]bool{}
	checked := 0
	for _, page := range pages(t) {
		for i, line := range get(page).prose {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[2]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				if file == "" {
					file = page
				} else {
					file = path.Join(path.Dir(page), file)
				}
				checked++
				if page == "README.md" {
					linkedFromReadme[file] = true
				}
				info, err := os.Stat(filepath.Join("..", filepath.FromSlash(file)))
				if err != nil || strings.HasPrefix(file, "../") {
					t.Errorf("%s:%d: [%s](%s): no such file %s", page, i+1, m[1], target, file)
					continue
				}
				if anchor == "" {
					continue
				}
				if info.IsDir() || !strings.HasSuffix(file, ".md") {
					t.Errorf("%s:%d: [%s](%s): an anchor in %s, which is no Markdown page", page, i+1, m[1], target, file)
					continue
				}
				if !get(file).anchors[anchor] {
					t.Errorf("%s:%d: [%s](%s): %s has no heading whose anchor is #%s", page, i+1, m[1], target, file, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d links, expected more: are they still found?", checked)
	}
	for _, page := range pages(t) {
		if strings.HasPrefix(page, "docs/") && !linkedFromReadme[page] {
			t.Errorf("%s: no link of README.md leads to it", page)
		}
	}
}
