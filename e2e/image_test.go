package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// TestImage builds the API's binary with `make binaries`, as `make image`
// does, and its image twice: the two tarballs are the same bytes. The
// image's layers, unpacked, hold the CA bundle and the binary, which runs
// as the image says (its entrypoint) and answers /readyz, and as Envoy
// Gateway runs it (/bin/ratelimit, a link to it, with envoyproxy/
// ratelimit's environment); the image runs as non-root.
func TestImage(t *testing.T) {
	t.Parallel()
	root := charttest.Root()
	dir := t.TempDir()
	bin := charttest.MakeBinary(t, "api", dir) // its --version: TestVersion
	var tars [2][]byte
	for i := range tars {
		out := filepath.Join(dir, fmt.Sprint("api", i, ".tar"))
		cmd := exec.Command("go", "run", "./imagebuild", "-binary", bin, "-name", "api", "-link", "bin/ratelimit", "-tag", "ratelimit-api:test", "-out", out)
		cmd.Dir, cmd.Env = filepath.Join(root, "tools"), append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("imagebuild: %v\n%s", err, o)
		}
		tars[i], _ = os.ReadFile(out)
	}
	if !bytes.Equal(tars[0], tars[1]) {
		t.Fatal("two builds of one binary differ")
	}
	files := readTar(t, tars[0])
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	var config struct {
		Created string `json:"created"`
		Config  struct {
			Entrypoint []string
			User       string
			Env        []string
		} `json:"config"`
	}
	if err := json.Unmarshal(files[manifest[0].Config], &config); err != nil {
		t.Fatal(err)
	}
	if config.Config.User != "65532:65532" || len(config.Config.Entrypoint) != 1 || !strings.HasPrefix(config.Created, "2023-11-14") {
		t.Fatalf("image config: %+v", config)
	}
	rootfs := filepath.Join(dir, "rootfs")
	links := map[string]string{}
	for _, layer := range manifest[0].Layers {
		zr, err := gzip.NewReader(bytes.NewReader(files[layer]))
		if err != nil {
			t.Fatalf("layer %s: %v", layer, err)
		}
		raw, _ := io.ReadAll(zr)
		for name, data := range readTar(t, raw) {
			path := filepath.Join(rootfs, name)
			os.MkdirAll(filepath.Dir(path), 0o755)
			if target, ok := strings.CutPrefix(string(data), symlinkPrefix); ok {
				links[name] = target
				if err := os.Symlink(filepath.Join(rootfs, target), path); err != nil {
					t.Fatal(err)
				}
			} else if !strings.HasSuffix(name, "/") {
				os.WriteFile(path, data, 0o755)
			}
		}
	}
	if links["bin/ratelimit"] != "/api" {
		t.Fatalf("the image's links %v, want bin/ratelimit to /api (Envoy Gateway's command)", links)
	}
	if pem, err := os.ReadFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt")); err != nil || bytes.Count(pem, []byte("BEGIN CERTIFICATE")) < 100 {
		t.Fatalf("the CA bundle: %d bytes, %v", len(pem), err)
	}
	port := testserver.FreePort(t)
	cmd := exec.Command(filepath.Join(rootfs, config.Config.Entrypoint[0]))
	cmd.Env = append([]string{"UNKEY_REGION=image", fmt.Sprintf("UNKEY_HTTP_ADDR=127.0.0.1:%d", port)}, config.Config.Env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	poll.Until(t, 20*time.Second, "the image's binary to answer /readyz", func() bool {
		return get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port)) == http.StatusOK
	})

	// As Envoy Gateway runs it: /bin/ratelimit, envoyproxy/ratelimit's
	// environment (its rule directory under RUNTIME_ROOT), the kubelet's
	// probe on /healthcheck.
	rules := filepath.Join(dir, "runtime", "config")
	os.MkdirAll(rules, 0o755)
	if err := os.WriteFile(filepath.Join(rules, "rules.yaml"), []byte("domain: d\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	port, grpcPort := testserver.FreePort(t), testserver.FreePort(t)
	rl := exec.Command(filepath.Join(rootfs, "bin/ratelimit"))
	rl.Env = append([]string{"USE_STATSD=false", "RUNTIME_ROOT=" + filepath.Join(dir, "runtime"), "HOST=127.0.0.1",
		fmt.Sprint("PORT=", port), "GRPC_HOST=127.0.0.1", fmt.Sprint("GRPC_PORT=", grpcPort)}, config.Config.Env...)
	if err := rl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Process.Kill(); rl.Wait() })
	poll.Until(t, 20*time.Second, "/bin/ratelimit to answer /healthcheck", func() bool {
		return get(fmt.Sprintf("http://127.0.0.1:%d/healthcheck", port)) == http.StatusOK
	})
}

// symlinkPrefix begins what readTar returns for a symbolic link: the
// prefix, then the link's target.
const symlinkPrefix = "symlink\x00"

// readTar returns the files of a tar archive by name.
func readTar(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeSymlink {
			b = []byte(symlinkPrefix + h.Linkname)
		}
		out[h.Name] = b
	}
}
