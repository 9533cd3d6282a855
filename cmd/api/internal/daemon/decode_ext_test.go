package daemon_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBatchAmplificationRefusedBeforeDecoding: a 1 KiB gzip body that
// expands to hundreds of thousands of empty entries is refused naming the
// bound, on BatchLimit and MultiLimit over Connect JSON and protobuf and on
// v2 multiLimit, having allocated a few megabytes at most (decoding them
// took about 65 MB).
func TestBatchAmplificationRefusedBeforeDecoding(t *testing.T) {
	ts := startServer(t)
	entries := func(open, close string, n int) []byte {
		var b bytes.Buffer
		b.WriteString(open)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("{}")
		}
		b.WriteString(close)
		return b.Bytes()
	}
	gz := func(body []byte) []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(body)
		zw.Close()
		return buf.Bytes()
	}
	const n = 349_000
	protoBomb := bytes.Repeat([]byte{0x0a, 0x00}, n) // field 1, empty message
	for _, tc := range []struct {
		name, path, contentType string
		body                    []byte
		want                    string
	}{
		{"BatchLimit JSON", "/ratelimit.v1.RatelimitService/BatchLimit", "application/json", entries(`{"limits":[`, `]}`, n), "limits: must hold 1 to 1000 limits"},
		{"MultiLimit JSON", "/ratelimit.v1.RatelimitService/MultiLimit", "application/json", entries(`{"limits":[`, `]}`, n), "limits: must hold 1 to 100 limits"},
		{"BatchLimit proto", "/ratelimit.v1.RatelimitService/BatchLimit", "application/proto", protoBomb, "limits: must hold 1 to 1000 limits"},
		{"v2 multiLimit", "/v2/ratelimit.multiLimit", "application/json", entries(`[`, `]`, n), "must hold 1 to 100 limits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, encoding := gz(tc.body), "gzip"
			if strings.HasPrefix(tc.path, "/v2/") {
				body, encoding = tc.body, "identity" // the v2 routes take no compression
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			status, raw := ts.postAs(t, tc.path, tc.contentType, bytes.NewReader(body), "Content-Encoding", encoding)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d bytes sent, %d entries: %d %q; %.1f MB allocated", len(body), n, status, trim(raw), float64(allocated)/1e6)
			if status != http.StatusBadRequest || !bytes.Contains(raw, []byte(tc.want)) {
				t.Fatalf("%d %s, want 400 naming %q", status, raw, tc.want)
			}
			if allocated > 16<<20 {
				t.Fatalf("refusing it allocated %.1f MB: the entries were decoded", float64(allocated)/1e6)
			}
		})
	}
}

// TestBatchBombsAtOnce sends 48 gzip bodies of 349,000 empty BatchLimit
// entries at once (50 KiB in all): every one is refused with a 4xx, and the
// test logs how far the process's resident memory grew (it reached 3.1 GB
// when they were decoded).
func TestBatchBombsAtOnce(t *testing.T) {
	ts := startServer(t)
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	zw.Write([]byte(`{"limits":[`))
	zw.Write(bytes.Repeat([]byte(`{},`), 349_000))
	zw.Write([]byte(`{}]}`))
	zw.Close()
	bomb := b.Bytes()
	idle := rssBytes(t)
	peak := idle
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
				peak = max(peak, rssBytes(t))
			}
		}
	}()
	statuses := make(chan int, 48)
	var wg sync.WaitGroup
	for range 48 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, ts.url+"/ratelimit.v1.RatelimitService/BatchLimit", bytes.NewReader(bomb))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Content-Encoding", "gzip")
			resp, err := ts.client.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	close(done)
	<-sampled
	close(statuses)
	counts := map[int]int{}
	for s := range statuses {
		counts[s]++
	}
	t.Logf("48 bombs of %d bytes: statuses %v; resident memory grew by %.1f MB at most", len(bomb), counts, float64(peak-idle)/1e6)
	for s, n := range counts {
		if s < 400 || s >= 500 {
			t.Fatalf("%d requests answered %d, want every one refused with a 4xx: %v", n, s, counts)
		}
	}
}

// rssBytes returns the process's resident set size.
func rssBytes(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	var size, resident uint64
	fmt.Sscan(string(b), &size, &resident)
	return resident * uint64(os.Getpagesize())
}

// postAs posts body with a content type and header pairs, no token.
func (ts *testServer) postAs(t *testing.T, path, contentType string, body *bytes.Reader, header ...string) (int, []byte) {
	t.Helper()
	return ts.post(t, path, "", body, append([]string{"Content-Type", contentType}, header...)...)
}

func trim(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// TestRLSJSONAmplificationRefusedBeforeDecoding: a ShouldRateLimit request
// in JSON whose one descriptor holds 200,000 empty entries (600 KB) is
// refused with the bound's message, on Connect JSON and on /json, without
// decoding the entries.
func TestRLSJSONAmplificationRefusedBeforeDecoding(t *testing.T) {
	ts := startServer(t)
	body := `{"domain":"d","descriptors":[{"entries":[` + strings.Repeat(`{},`, 200_000) + `{}]}]}`
	for _, path := range []string{"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "/json"} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		status, raw := ts.post(t, path, "", strings.NewReader(body))
		runtime.ReadMemStats(&after)
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d %s %.1f MB", path, status, trim(raw), float64(allocated)/1e6)
		if status != http.StatusBadRequest || !strings.Contains(string(raw), "must hold 1 to 100 descriptors") {
			t.Errorf("%s: %d %s, want 400 naming the bound", path, status, trim(raw))
		}
		if allocated > 20<<20 {
			t.Errorf("%s: refusing it allocated %.1f MB: the entries were decoded", path, float64(allocated)/1e6)
		}
	}
}
