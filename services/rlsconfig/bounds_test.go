package rlsconfig

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// nestedXDS returns a resource of one descriptor nested depth deep, a
// limit at the bottom.
func nestedXDS(depth int) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{chain(depth, 1, "v")}}
}

// chain returns descriptors nested depth deep, each of a key of keyBytes
// and value, a limit at the bottom.
func chain(depth, keyBytes int, value string) *rlsconfv3.RateLimitDescriptor {
	var d *rlsconfv3.RateLimitDescriptor
	for range depth {
		n := &rlsconfv3.RateLimitDescriptor{Key: strings.Repeat("k", keyBytes), Value: value}
		if d != nil {
			n.Descriptors = []*rlsconfv3.RateLimitDescriptor{d}
		} else {
			n.RateLimit = &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}
		}
		d = n
	}
	return d
}

// chainsXDS returns a resource of chains (see chain) of about size bytes.
func chainsXDS(depth, keyBytes, size int) *rlsconfv3.RateLimitConfig {
	rc := &rlsconfv3.RateLimitConfig{Name: "r", Domain: "d"}
	for i, total := 0, 0; total < size; i++ {
		d := chain(depth, keyBytes, fmt.Sprint(i))
		total += proto.Size(d) + 4
		rc.Descriptors = append(rc.Descriptors, d)
	}
	return rc
}

// allocated returns the bytes LoadXDS allocates compiling rc, and its error.
func allocated(rc *rlsconfv3.RateLimitConfig) (uint64, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := LoadXDS(rc)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, err
}

// TestBoundsRefuseBeforeCompiling: a response past a bound is refused
// naming its setting, at a cost that does not grow with it (before the
// bounds, descriptors nested 9,000 deep, an 88 KB response, allocated
// 1.2 GB: every level wrote out its path), and one within them compiles
// at a cost in proportion to its size.
func TestBoundsRefuseBeforeCompiling(t *testing.T) {
	for _, c := range []struct {
		name    string
		rc      *rlsconfv3.RateLimitConfig
		setting string
	}{
		{"nested 9000 deep", nestedXDS(9000), "UNKEY_RLS_MAX_DEPTH"},
		{"nested 33 deep", nestedXDS(33), "UNKEY_RLS_MAX_DEPTH"},
		{"16 MiB of 32-deep chains of 1 KB keys", chainsXDS(32, 1000, 16<<20-4096), "UNKEY_RLS_MAX_RULES_BYTES"},
		{"1.5 million descriptors", chainsXDS(1, 1, 15<<20), "UNKEY_RLS_MAX_DESCRIPTORS"},
	} {
		n, err := allocated(c.rc)
		t.Logf("%s: %d bytes of response, %d bytes allocated: %v", c.name, proto.Size(c.rc), n, err)
		if err == nil || !strings.Contains(err.Error(), c.setting) || !strings.Contains(err.Error(), `xds resource "r"`) {
			t.Fatalf("%s: %v; want refused naming the resource and %s", c.name, err, c.setting)
		}
		if n > 64<<10 {
			t.Errorf("%s: refusing it allocated %d bytes; want under 64 KiB", c.name, n)
		}
	}
	if _, err := LoadXDS(nestedXDS(32)); err != nil {
		t.Fatalf("32 deep, the bound: %v", err)
	}
	// Linear: four times the response, about four times the memory.
	small, err1 := allocated(chainsXDS(8, 100, 1<<20))
	large, err2 := allocated(chainsXDS(8, 100, 4<<20))
	t.Logf("8-deep chains: 1 MiB allocated %d bytes, 4 MiB %d", small, large)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if r := float64(large) / float64(small); r < 3 || r > 5 {
		t.Errorf("a response 4 times larger allocated %.2f times as much; want about 4 (linear)", r)
	}
}

// TestBoundsOfFiles: files are held to the same bounds.
func TestBoundsOfFiles(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	indent := ""
	for i := range 33 {
		fmt.Fprintf(&b, "%s  - key: k%d\n", indent, i)
		if i == 32 {
			fmt.Fprintf(&b, "%s    rate_limit: {unit: second, requests_per_unit: 1}\n", indent)
		} else {
			fmt.Fprintf(&b, "%s    descriptors:\n", indent)
		}
		indent += "    "
	}
	_, err := Load(File{Name: "deep.yaml", Data: []byte(b.String())})
	if err == nil || !strings.Contains(err.Error(), "deep.yaml") || !strings.Contains(err.Error(), "UNKEY_RLS_MAX_DEPTH") {
		t.Fatalf("33 deep: %v; want refused naming the file and UNKEY_RLS_MAX_DEPTH", err)
	}
	tight := Compiler{Bounds: Bounds{MaxDepth: 32, MaxDescriptors: 1, MaxBytes: 1 << 20}}
	_, err = tight.Load(File{Name: "two.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n")})
	if err == nil || !strings.Contains(err.Error(), "UNKEY_RLS_MAX_DESCRIPTORS") {
		t.Fatalf("two descriptors past a bound of one: %v", err)
	}
}
