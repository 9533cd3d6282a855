package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
)

// TestLicenceAndNotice: LICENSE is the Apache License 2.0, whole, and
// NOTICE is what scripts/notice.sh writes: the NOTICE file of every
// module the programs link, which the licence asks a redistribution to
// carry. A dependency that adds or changes one fails this until `make
// notice` is run.
func TestLicenceAndNotice(t *testing.T) {
	t.Parallel()
	root := charttest.Root()
	licence, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Apache License\n                           Version 2.0, January 2004",
		"TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "4. Redistribution.", "END OF TERMS AND CONDITIONS"} {
		if !strings.Contains(string(licence), want) {
			t.Errorf("LICENSE lacks %q: it is not the Apache License 2.0 as published", want)
		}
	}
	cmd := exec.Command("scripts/notice.sh")
	cmd.Dir = root
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/notice.sh: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(root, "NOTICE"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("NOTICE is not what scripts/notice.sh writes for today's dependencies: run make notice\n--- want\n%s", want)
	}
	if !strings.Contains(string(want), "---- google.golang.org/grpc@") || !strings.Contains(string(want), "---- github.com/prometheus/client_golang@") {
		t.Error("NOTICE names neither grpc's nor Prometheus's NOTICE, which the programs link")
	}
}

// TestChangelog: CHANGELOG.md keeps Keep a Changelog's shape (a section
// for what is unreleased, then each version, newest first, with its date,
// and a link for each) and has a section for the chart's appVersion, the
// version the binaries, the images and the chart say they are.
func TestChangelog(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(charttest.Root(), "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	if !strings.HasPrefix(text, "# Changelog\n") || !strings.Contains(text, "keepachangelog.com/en/1.1.0") {
		t.Error("CHANGELOG.md does not open as Keep a Changelog 1.1.0 does")
	}
	heads := regexp.MustCompile(`(?m)^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$`).FindAllStringSubmatch(text, -1)
	if len(heads) < 2 || heads[0][1] != "Unreleased" {
		t.Fatalf("CHANGELOG.md's sections %q: want [Unreleased] first, then the versions", heads)
	}
	var versions []string
	prevDate := "9999-99-99"
	for _, h := range heads[1:] {
		if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(h[1]) || h[2] == "" {
			t.Errorf("section %q: want ## [MAJOR.MINOR.PATCH] - YYYY-MM-DD", h[0])
		}
		if h[2] > prevDate {
			t.Errorf("section %q is dated after the one above it: newest first", h[0])
		}
		prevDate = h[2]
		versions = append(versions, h[1])
	}
	for _, v := range append([]string{"Unreleased"}, versions...) {
		if !strings.Contains(text, "\n["+v+"]: https://") {
			t.Errorf("CHANGELOG.md has no link for [%s]", v)
		}
	}
	if v := charttest.AppVersion(t); !slices.Contains(versions, v) {
		t.Errorf("CHANGELOG.md has no section for %s, the chart's appVersion", v)
	}
}

// TestRelease runs `make release` as a maintainer would (the tree may
// hold uncommitted changes here: RELEASE_DIRTY): its directory holds the
// binaries, which say the chart's version, the images, tagged with it,
// LICENSE, NOTICE and CHANGELOG.md, and SHA256SUMS, whose every line
// holds for the file it names and names every file. A VERSION that is
// not the chart's is refused, naming the one place to set it.
func TestRelease(t *testing.T) {
	t.Parallel()
	root := charttest.Root()
	version := charttest.AppVersion(t)
	dir := filepath.Join(t.TempDir(), "release")
	cmd := exec.Command("make", "--no-print-directory", "release", "RELEASE_DIR="+dir, "RELEASE_DIRTY=1", "SOURCE_DATE_EPOCH="+charttest.BuildEpoch)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not sha256sum's", line)
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(data); hex.EncodeToString(h[:]) != sum {
			t.Errorf("SHA256SUMS says %s of %s, which hashes to %x", sum, name, h)
		}
		listed = append(listed, name)
	}
	want := []string{"CHANGELOG.md", "LICENSE", "NOTICE", "bin/api", "bin/worker", "images/api.tar", "images/worker.tar"}
	slices.Sort(listed)
	if !slices.Equal(listed, want) {
		t.Errorf("SHA256SUMS lists %q, want %q", listed, want)
	}
	for _, name := range []string{"api", "worker"} {
		out, err := exec.Command(filepath.Join(dir, "bin", name), "--version").CombinedOutput()
		if w := charttest.WantVersion(t, name); err != nil || strings.TrimSpace(string(out)) != w {
			t.Errorf("the release's %s --version: %v %q, want %q", name, err, out, w)
		}
		tarball, err := os.ReadFile(filepath.Join(dir, "images", name+".tar"))
		if err != nil {
			t.Fatal(err)
		}
		var manifest []struct{ RepoTags []string }
		if err := json.Unmarshal(readTar(t, tarball)["manifest.json"], &manifest); err != nil || len(manifest) != 1 ||
			!slices.Equal(manifest[0].RepoTags, []string{"ratelimit-" + name + ":" + version}) {
			t.Errorf("the release's %s image is tagged %+v (%v), want ratelimit-%s:%s", name, manifest, err, name, version)
		}
	}
	cmd = exec.Command("make", "--no-print-directory", "release", "VERSION=99.0.0", "RELEASE_DIR="+dir+"-other", "RELEASE_DIRTY=1")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Chart.yaml") {
		t.Errorf("make release VERSION=99.0.0: %v %q, want a refusal naming the chart's appVersion", err, out)
	}
}
