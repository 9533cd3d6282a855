// Command imagebuild writes an OCI image of one static binary as a tarball
// that `docker load`, `podman load` and `crane push` take: the binary at
// /NAME, Mozilla's CA certificates (from golang.org/x/crypto's pinned NSS
// bundle) at /etc/ssl/certs/ca-certificates.crt, a writable /tmp, run as
// user 65532 (nonroot). Built from Go alone, without Docker, and byte for
// byte the same for the same binary: every timestamp is SOURCE_DATE_EPOCH
// (0 when unset), files are in a fixed order with fixed owners and modes.
//
// Usage: imagebuild -binary PATH -name NAME -tag REF -out FILE
package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

func main() {
	binary := flag.String("binary", "", "the static binary")
	bin := flag.String("name", "", "its name in the image: /NAME, the entrypoint")
	tag := flag.String("tag", "", "the image's reference in the tarball, e.g. ratelimit-api:dev")
	out := flag.String("out", "", "the tarball to write")
	link := flag.String("link", "", "another path of the binary in the image (a symbolic link), e.g. bin/ratelimit; empty: none")
	flag.Parse()
	if *binary == "" || *bin == "" || *tag == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := build(*binary, *bin, *tag, *out, *link); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

// epoch is SOURCE_DATE_EPOCH, or the Unix epoch.
func epoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
	}
	return time.Unix(n, 0).UTC(), nil
}

func build(binary, bin, tag, out, link string) error {
	when, err := epoch()
	if err != nil {
		return err
	}
	exe, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	var certs bytes.Buffer
	for root := range bundle.Roots() {
		pem.Encode(&certs, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})
	}
	base, err := layer(when, []entry{
		{name: "etc/", dir: true, mode: 0o755},
		{name: "etc/ssl/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", data: certs.Bytes(), mode: 0o644},
		{name: "etc/passwd", data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"), mode: 0o644},
		{name: "etc/group", data: []byte("root:x:0:\nnonroot:x:65532:\n"), mode: 0o644},
		{name: "home/", dir: true, mode: 0o755},
		{name: "home/nonroot/", dir: true, mode: 0o700, uid: 65532},
		{name: "tmp/", dir: true, mode: 0o1777},
	})
	if err != nil {
		return err
	}
	files := []entry{{name: bin, data: exe, mode: 0o755}}
	if link != "" {
		// The binary under another name too: the API's image is run as
		// /bin/ratelimit where envoyproxy/ratelimit's was (Envoy
		// Gateway's deployment sets that command), and serves with that
		// service's environment when started by that name.
		if dir := path.Dir(link); dir != "." {
			files = append(files, entry{name: dir + "/", dir: true, mode: 0o755})
		}
		files = append(files, entry{name: link, linkTo: "/" + bin, mode: 0o777})
	}
	app, err := layer(when, files)
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), base, app)
	if err != nil {
		return err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Created = v1.Time{Time: when}
	cfg.Config = v1.Config{
		Entrypoint: []string{"/" + bin},
		User:       "65532:65532",
		WorkingDir: "/home/nonroot",
		Env:        []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "HOME=/home/nonroot"},
		Labels: map[string]string{
			"org.opencontainers.image.source": "https://github.com/unkeyed/ratelimit",
			"org.opencontainers.image.title":  bin,
		},
	}
	cfg.History = nil
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return err
	}
	img, err = mutate.CreatedAt(img, v1.Time{Time: when})
	if err != nil {
		return err
	}
	ref, err := name.ParseReference(tag)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, ref, img)
}

type entry struct {
	name string
	data []byte
	dir  bool
	// linkTo makes the entry a symbolic link to that path.
	linkTo string
	mode   int64
	uid    int
}

// layer returns an uncompressed-then-gzipped layer of entries, in order,
// with every time when and owner root (or uid).
func layer(when time.Time, entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: when, AccessTime: when, ChangeTime: when,
			Uid: e.uid, Gid: e.uid, Format: tar.FormatPAX}
		switch {
		case e.dir:
			h.Typeflag = tar.TypeDir
		case e.linkTo != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.linkTo
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}
