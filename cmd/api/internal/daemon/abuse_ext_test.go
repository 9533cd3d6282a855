package daemon_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
)

// rawRequest writes req to a fresh TCP connection to ts and returns the
// status line of the answer, or the error that ended the wait for it.
func rawRequest(t *testing.T, ts *testServer, req string, within time.Duration) (string, error) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(within))
	if _, err := io.WriteString(conn, req); err != nil {
		return "", err
	}
	return bufio.NewReader(conn).ReadString('\n')
}

// gzipped compresses n bytes of body, padded with spaces (valid JSON
// whitespace) after the object.
func gzipped(t *testing.T, body string, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	io.WriteString(zw, body)
	pad := bytes.Repeat([]byte(" "), 1<<16)
	for left := n - len(body); left > 0; left -= len(pad) {
		zw.Write(pad[:min(left, len(pad))])
	}
	zw.Close()
	return buf.Bytes()
}

// postGzip posts a gzip-compressed Connect JSON Limit body with token (none
// if empty) and returns the status and the decoded answer.
func postGzip(t *testing.T, ts *testServer, token string, body []byte) (int, map[string]any) {
	t.Helper()
	status, raw := ts.post(t, "/ratelimit.v1.RatelimitService/Limit", token, bytes.NewReader(body), "Content-Encoding", "gzip")
	var out map[string]any
	json.Unmarshal(raw, &out)
	return status, out
}

// TestAuthBeforeBody: with tokens configured, a caller without a valid token
// is refused before the server reads its body: a body that never arrives, a
// malformed one and one that would expand to 64 MiB all get 401 at once.
func TestAuthBeforeBody(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")
	status, err := rawRequest(t, ts, "POST /ratelimit.v1.RatelimitService/Limit HTTP/1.1\r\nHost: x\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n", 2*time.Second)
	if err != nil || !strings.Contains(status, " 401 ") {
		t.Fatalf("no token, body never sent: %q, %v; want 401 without waiting for the body", status, err)
	}
	if code, out := ts.call(t, "Limit", "", `{"namespace":`); code != http.StatusUnauthorized || out["code"] != "unauthenticated" {
		t.Fatalf("malformed body without a token: %d %v, want 401 unauthenticated", code, out)
	}
	bomb := gzipped(t, `{}`, 64<<20)
	for _, token := range []string{"", "tok_unknown_0123456789"} {
		if code, _ := postGzip(t, ts, token, bomb); code != http.StatusUnauthorized {
			t.Fatalf("gzip bomb with token %q: %d, want 401", token, code)
		}
	}
	// Over gRPC the refusal is a gRPC status, before the message is read.
	client := ratelimitv1connect.NewRatelimitServiceClient(ts.h2c, ts.url, connect.WithGRPC())
	_, err = client.Limit(context.Background(), connect.NewRequest(&ratelimitv1.LimitRequest{Namespace: "n", Identifier: "i", Limit: 1, Duration: 1000}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("gRPC without a token: %v, want unauthenticated", err)
	}
}

// TestMessageCapAfterDecompression: the 1 MiB cap is on the decoded
// message. A compressed body that expands past it is invalid_argument with
// the documented message, and expansion stops there; a gRPC message of
// exactly 1 MiB passes, since its envelope is not part of the message.
func TestMessageCapAfterDecompression(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")
	const tooLarge = "request body: must be at most 1048576 bytes (1 MiB)"
	valid := `{"namespace":"n","identifier":"gz","limit":5,"duration":2592000000}`
	for _, size := range []int{3 << 20, 64 << 20} {
		code, out := postGzip(t, ts, tokA, gzipped(t, valid, size))
		if code != http.StatusBadRequest || out["code"] != "invalid_argument" || out["message"] != tooLarge {
			t.Fatalf("gzip body expanding to %d bytes: %d %v, want invalid_argument %q", size, code, out, tooLarge)
		}
	}
	// A compressed body under the cap is decoded as usual.
	if code, out := postGzip(t, ts, tokA, gzipped(t, valid, 1000)); code != http.StatusOK || out["success"] != true {
		t.Fatalf("small gzip body: %d %v, want it decided", code, out)
	}

	// gRPC: a message of exactly 1 MiB (a valid request padded with an
	// unknown field) passes; one byte more is refused with the same message.
	grpc := ratelimitv1connect.NewRatelimitServiceClient(ts.h2c, ts.url, connect.WithGRPC())
	for _, extra := range []int{0, 1} {
		msg := paddedRequest(t, transport.MaxRequestBytes+extra)
		r := connect.NewRequest(msg)
		r.Header().Set("Authorization", "Bearer "+tokA)
		resp, err := grpc.Limit(context.Background(), r)
		switch {
		case extra == 0 && (err != nil || !resp.Msg.Success):
			t.Fatalf("1 MiB gRPC message: %v, %v; want it decided", resp, err)
		case extra == 1 && (connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(fmt.Sprint(err), tooLarge)):
			t.Fatalf("1 MiB + 1 gRPC message: %v, want invalid_argument %q", err, tooLarge)
		}
	}
}

// paddedRequest returns a valid LimitRequest whose encoding is exactly size
// bytes: the padding is an unknown field, which the server skips.
func paddedRequest(t *testing.T, size int) *ratelimitv1.LimitRequest {
	t.Helper()
	msg := &ratelimitv1.LimitRequest{Namespace: "n", Identifier: "padded", Limit: 5, Duration: 2592000000}
	n := size - proto.Size(msg) - protowire.SizeTag(1000) - 3 // 3: the length of a ~1 MiB field
	unknown := protowire.AppendTag(nil, 1000, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, bytes.Repeat([]byte{'p'}, n))
	msg.ProtoReflect().SetUnknown(unknown)
	if got := proto.Size(msg); got != size {
		t.Fatalf("padded request is %d bytes, want %d", got, size)
	}
	return msg
}

// TestConnectionLimits: a body that never arrives, an idle keep-alive
// connection and an HTTP/2 stream that never sends its body are each ended
// after their timeout (shortened here); a 1,000,000-byte header is refused;
// HTTP/2 advertises its stream and header-list bounds.
func TestConnectionLimits(t *testing.T) {
	ts := startServer(t, "UNKEY_HTTP_READ_TIMEOUT=300ms", "UNKEY_HTTP_IDLE_TIMEOUT=300ms")

	// Headers, then a body that never comes: the server gives up after the
	// read timeout instead of holding the connection.
	start := time.Now()
	_, err := rawRequest(t, ts, "POST /ratelimit.v1.RatelimitService/Limit HTTP/1.1\r\nHost: x\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n", 5*time.Second)
	if isTimeout(err) {
		t.Fatalf("a request without its body was held for %v, want it ended after the 300 ms read timeout", time.Since(start))
	}

	// An idle keep-alive connection is closed after the idle timeout.
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("idle keep-alive connection: %v, want it closed by the server (EOF)", err)
	}

	// A header of 1,000,000 bytes is refused.
	status, err := rawRequest(t, ts, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 1_000_000)+"\r\n\r\n", 5*time.Second)
	if err != nil || !strings.Contains(status, " 431 ") {
		t.Fatalf("1 MB header: %q, %v; want 431", status, err)
	}

	// HTTP/2: the server's settings bound the streams and the header list,
	// and a stream that never sends its body is reset after the read timeout.
	h2 := dialH2C(t, ts)
	settings := h2.settings(t)
	if got := settings[http2.SettingMaxConcurrentStreams]; got != 100 {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want 100", got)
	}
	if got := settings[http2.SettingMaxHeaderListSize]; got == 0 || got > 64<<10 {
		t.Fatalf("SETTINGS_MAX_HEADER_LIST_SIZE = %d, want at most 64 KiB", got)
	}
	h2.openStream(t, 1, "/ratelimit.v1.RatelimitService/Limit")
	start = time.Now()
	if !h2.waitStreamEnd(t, 1, 5*time.Second) {
		t.Fatal("an HTTP/2 stream without its body was still open after 5 s, want it ended after the 300 ms read timeout")
	}
	t.Logf("HTTP/2 stream without a body ended after %v", time.Since(start).Round(10*time.Millisecond))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// h2Conn is a raw h2c connection, for what a well-behaved client never does.
type h2Conn struct {
	conn net.Conn
	fr   *http2.Framer
}

func dialH2C(t *testing.T, ts *testServer) *h2Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	io.WriteString(conn, http2.ClientPreface)
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return &h2Conn{conn: conn, fr: fr}
}

// settings returns the server's first SETTINGS frame.
func (c *h2Conn) settings(t *testing.T) map[http2.SettingID]uint32 {
	t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			out := map[http2.SettingID]uint32{}
			sf.ForeachSetting(func(s http2.Setting) error { out[s.ID] = s.Val; return nil })
			c.fr.WriteSettingsAck()
			return out
		}
	}
}

// openStream sends the headers of a Connect JSON POST on stream id and no
// body.
func (c *h2Conn) openStream(t *testing.T, id uint32, path string) {
	t.Helper()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", path},
		{"content-type", "application/json"}, {"content-length", "100"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// waitStreamEnd reports whether the server ended stream id (an answer that
// ends the stream, or a reset) within d.
func (c *h2Conn) waitStreamEnd(t *testing.T, id uint32, d time.Duration) bool {
	t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(d))
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return !isTimeout(err) // the connection closed: the stream ended too
		}
		if f.Header().StreamID != id {
			continue
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			return true
		case *http2.DataFrame:
			if f.StreamEnded() {
				return true
			}
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				return true
			}
		}
	}
}

// TestWindowCapPerWorkspace: a workspace minting identifiers is stopped at
// UNKEY_MAX_WINDOWS_PER_WORKSPACE with resource_exhausted naming the cap,
// counted in a metric; its existing keys keep deciding, and another
// workspace is not affected.
func TestWindowCapPerWorkspace(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a,"+tokB+"=ws_b", "UNKEY_MAX_WINDOWS_PER_WORKSPACE=50")
	body := func(id string) string {
		return `{"namespace":"n","identifier":"` + id + `","limit":1,"duration":2592000000}`
	}
	// MultiLimit batches, as the attack sent them.
	var batch []string
	for i := range 50 {
		batch = append(batch, body(fmt.Sprint("id", i)))
	}
	if code, out := ts.call(t, "MultiLimit", tokA, `{"limits":[`+strings.Join(batch[:25], ",")+`]}`); code != http.StatusOK || out["passed"] != true {
		t.Fatalf("first 25: %d %v", code, out)
	}
	for i := 25; i < 50; i++ {
		if code, out := ts.call(t, "Limit", tokA, body(fmt.Sprint("id", i))); code != http.StatusOK {
			t.Fatalf("key %d of 50: %d %v", i, code, out)
		}
	}
	code, out := ts.call(t, "Limit", tokA, body("one-too-many"))
	if code != http.StatusTooManyRequests || out["code"] != "resource_exhausted" ||
		!strings.Contains(fmt.Sprint(out["message"]), "this workspace holds 50, the most UNKEY_MAX_WINDOWS_PER_WORKSPACE allows") {
		t.Fatalf("51st key: %d %v, want resource_exhausted naming the cap", code, out)
	}
	code, out = ts.call(t, "MultiLimit", tokA, `{"limits":[`+body("id0")+`,`+body("another")+`]}`)
	if out["code"] != "resource_exhausted" {
		t.Fatalf("a batch with a new key past the cap: %d %v, want resource_exhausted", code, out)
	}
	// BatchLimit decides each entry: the new key is denied at the cap, with
	// the reset of its window like any denial.
	code, out = ts.call(t, "BatchLimit", tokA, `{"limits":[`+body("id1")+`,`+body("yet-another")+`]}`)
	results, _ := out["results"].([]any)
	if code != http.StatusOK || len(results) != 2 {
		t.Fatalf("BatchLimit past the cap: %d %v", code, out)
	}
	if r := results[1].(map[string]any); r["success"] != false || r["reset"] == "0" || r["reset"] == nil {
		t.Fatalf("BatchLimit's entry denied at the cap: %v, want denied with its window's reset", r)
	}
	// The held keys still decide: id0 was spent by the first batch.
	if _, out := ts.call(t, "Limit", tokA, body("id0")); out["success"] != false {
		t.Fatalf("a held key: %v, want it still denied (spent)", out)
	}
	if _, out := ts.call(t, "Limit", tokB, body("one-too-many")); out["success"] != true {
		t.Fatalf("another workspace: %v, want it unaffected", out)
	}
	_, metrics := ts.get(t, "/metrics")
	if !strings.Contains(metrics, `unkey_ratelimit_windows_rejected_total{source="request"} 3`) {
		t.Fatalf("metrics lack the two rejected windows:\n%s", loopback.Lines(metrics, "windows_"))
	}
}

// TestJunkConnectionsDoNotFloodTheLog: 300 connections that open HTTP/2
// and send garbage write a bounded number of log lines (before: a WARN
// line each).
const junkConnections = 300

func TestJunkConnectionsDoNotFloodTheLog(t *testing.T) {
	var log loopback.Log
	ts := startServerLogging(t, slog.New(slog.NewTextHandler(&log, nil)))
	addr := strings.TrimPrefix(ts.url, "http://")
	for range junkConnections {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x04\x09\x00\x00\x00\x00\x00junkjunk"))
		c.Close()
	}
	lines := 0
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "level=WARN") && !strings.Contains(l, "UNKEY_AUTH_TOKENS") {
			lines++
		}
	}
	t.Logf("%d WARN lines for 300 junk connections", lines)
	if lines == 0 {
		t.Fatal("junk connections are not logged at all: the test does not reach the server's error log")
	}
	if lines > 15 {
		t.Fatalf("%d WARN lines for 300 junk connections, want the throttle's burst", lines)
	}
}
