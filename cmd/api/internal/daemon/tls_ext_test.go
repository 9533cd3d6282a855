package daemon_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// serialOf returns the serial of the certificate a new TLS connection to
// addr is served.
func serialOf(t *testing.T, addr string, pool *x509.CertPool) int64 {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TestTLS: with UNKEY_TLS_CERT_FILE and UNKEY_TLS_KEY_FILE both ports speak
// TLS only: curl (HTTP/1.1 or HTTP/2 by ALPN), a Connect client over
// HTTP/2 and grpc-go on both ports are answered; a certificate rotated in
// place is served to new connections within a couple of seconds while a
// client keeps calling without a failure.
func TestTLS(t *testing.T) {
	t.Parallel()
	ca := testserver.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.Issue(t, dir, 100, false)
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.PEM, 0o644)
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a", "UNKEY_GRPC_ADDR=127.0.0.1:0",
		"UNKEY_TLS_CERT_FILE="+certFile, "UNKEY_TLS_KEY_FILE="+keyFile)
	addr := strings.TrimPrefix(ts.url, "http://")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)

	if curl, err := exec.LookPath("curl"); err == nil {
		out, err := exec.Command(curl, "-sS", "--cacert", caFile, "https://"+addr+"/ratelimit.v1.RatelimitService/Limit",
			"-H", "content-type: application/json", "-H", "authorization: Bearer "+tokA,
			"-d", `{"namespace":"tls","identifier":"curl","limit":5,"duration":60000}`).CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"success":true`) {
			t.Fatalf("curl --cacert: %s, %v", out, err)
		}
	}
	if resp, err := http.Get(ts.url + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("the TLS port answered cleartext HTTP") // net/http answers 400 to it
		}
	}
	for _, target := range []string{addr, ts.grpcAddr} {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
		if err != nil {
			t.Fatal(err)
		}
		out := new(ratelimitv1.LimitResponse)
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tokA)
		if err := conn.Invoke(ctx, "/ratelimit.v1.RatelimitService/Limit",
			&ratelimitv1.LimitRequest{Namespace: "tls", Identifier: "grpc", Limit: 5, Duration: 60_000}, out); err != nil || !out.Success {
			t.Fatalf("grpc-go over TLS to %s: %v, %v", target, out, err)
		}
		conn.Close()
	}

	// A client keeps calling (new connections and a kept one) while the
	// certificate is rotated.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	stop := make(chan struct{})
	var calls, failed atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			req, _ := http.NewRequest("POST", "https://"+addr+"/ratelimit.v1.RatelimitService/Limit",
				strings.NewReader(`{"namespace":"tls","identifier":"rotation","limit":1000000,"duration":60000}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+tokA)
			resp, err := client.Do(req)
			calls.Add(1)
			if err != nil || resp.StatusCode != 200 {
				failed.Add(1)
			}
			if resp != nil {
				resp.Body.Close()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	if got := serialOf(t, addr, pool); got != 100 {
		t.Fatalf("serial %d before the rotation", got)
	}
	ca.Issue(t, dir, 101, false)
	poll.Until(t, 10*time.Second, "new connections to be served the rotated certificate", func() bool {
		return serialOf(t, addr, pool) == 101 && serialOf(t, ts.grpcAddr, pool) == 101
	})
	close(stop)
	<-done
	if failed.Load() != 0 {
		t.Fatalf("%d of %d calls failed across the rotation", failed.Load(), calls.Load())
	}
}

// TestMutualTLS: with UNKEY_TLS_CLIENT_CA_FILE a client without a
// certificate that CA signed fails the handshake; one with it is
// answered, an Envoy's quota stream on either port too.
func TestMutualTLS(t *testing.T) {
	ca := testserver.NewCA(t)
	dir, clientDir := t.TempDir(), t.TempDir()
	certFile, keyFile := ca.Issue(t, dir, 200, false)
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.PEM, 0o644)
	ts := startServer(t, "UNKEY_GRPC_ADDR=127.0.0.1:0",
		"UNKEY_TLS_CERT_FILE="+certFile, "UNKEY_TLS_KEY_FILE="+keyFile, "UNKEY_TLS_CLIENT_CA_FILE="+caFile)
	addr := strings.TrimPrefix(ts.url, "http://")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	for _, target := range []string{addr, ts.grpcAddr} {
		c, err := tls.Dial("tcp", target, &tls.Config{RootCAs: pool})
		if err == nil {
			// TLS 1.3 reports a refused client certificate at the first read.
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		if err == nil {
			t.Fatalf("%s: a client without a certificate was served", target)
		}
	}
	clientCert, clientKey := ca.Issue(t, clientDir, 201, true)
	pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
	resp, err := client.Get("https://" + addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a client with a certificate the CA signed: %v, %v", resp, err)
	}
	resp.Body.Close()
	// Envoy's quota stream with its certificate, on both ports: answered
	// (no rule, so ALLOW_ALL).
	for _, target := range []string{addr, ts.grpcAddr} {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool,
			Certificates: []tls.Certificate{pair}})))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s, _ := assigned(t, stream, quotaReport("alice", 0, 0, 0)); s.GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL {
			t.Fatalf("%s: a quota stream under mutual TLS was assigned %v, want ALLOW_ALL (no rule)", target, s)
		}
	}
}

// TestExpiredCertificate: a server whose certificate has expired starts
// (a renewal may be on its way), says so in its log and in
// unkey_tls_certificate_expiry_timestamp_seconds, and clients refuse it;
// once a renewed certificate is written, new connections are served
// without a restart. Under mutual TLS a client with an expired certificate
// fails the handshake.
func TestExpiredCertificate(t *testing.T) {
	ca := testserver.NewCA(t)
	dir, clientDir := t.TempDir(), t.TempDir()
	expired := time.Now().Add(-time.Minute).Truncate(time.Second)
	certFile, keyFile := ca.IssueValid(t, dir, 300, false, expired.Add(-time.Hour), expired)
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.PEM, 0o644)
	var log loopback.Log
	ts := startServerLogging(t, slog.New(slog.NewTextHandler(&log, nil)), "UNKEY_TLS_CERT_FILE="+certFile,
		"UNKEY_TLS_KEY_FILE="+keyFile, "UNKEY_TLS_CLIENT_CA_FILE="+caFile)
	addr := strings.TrimPrefix(ts.url, "http://")
	if !strings.Contains(log.String(), "the TLS certificate has expired") {
		t.Fatalf("an expired certificate was not logged:\n%s", log.String())
	}
	if got := gaugeValue(t, ts.srv.Registry(), "unkey_tls_certificate_expiry_timestamp_seconds"); got != float64(expired.Unix()) {
		t.Fatalf("expiry gauge %v, want %d", got, expired.Unix())
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	clientCert, clientKey := ca.Issue(t, clientDir, 301, true)
	pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	get := func(pair tls.Certificate) error {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
		resp, err := client.Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	var invalid x509.CertificateInvalidError
	if err := get(pair); !errors.As(err, &invalid) || invalid.Reason != x509.Expired {
		t.Fatalf("a client met the expired certificate with %v, want x509 expired", err)
	}
	ca.Issue(t, dir, 302, false)
	poll.Until(t, 10*time.Second, "the renewed certificate to be served", func() bool { return get(pair) == nil })
	if got := gaugeValue(t, ts.srv.Registry(), "unkey_tls_certificate_expiry_timestamp_seconds"); got <= float64(time.Now().Unix()) {
		t.Fatalf("expiry gauge %v after the renewal, want a future time", got)
	}

	expiredClient, expiredKey := ca.IssueValid(t, clientDir, 303, true, expired.Add(-time.Hour), expired)
	old, err := tls.LoadX509KeyPair(expiredClient, expiredKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(old); err == nil {
		t.Fatal("a client with an expired certificate was served under mutual TLS")
	}
}

// gaugeValue returns the value of the unlabelled gauge name in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestRedisOverMutualTLS: a Redis that speaks TLS only, with a certificate
// of a private CA, and refuses clients without one of its own: the process
// reaches it with UNKEY_REDIS_TLS_CA_FILE and its client certificate, and
// its windows are written there.
func TestRedisOverMutualTLS(t *testing.T) {
	ca := testserver.NewCA(t)
	certFile, keyFile, caFile := ca.ServerFiles(t, t.TempDir())
	clientCert, clientKey := ca.Issue(t, t.TempDir(), 301, true)
	pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	r := testserver.StartRedisMutualTLS(t, certFile, keyFile, caFile, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{pair}})
	ts := startServer(t, "UNKEY_REDIS_URL=rediss://"+r.Addr, "UNKEY_REDIS_TLS_CA_FILE="+caFile,
		"UNKEY_REDIS_TLS_CERT_FILE="+clientCert, "UNKEY_REDIS_TLS_KEY_FILE="+clientKey)
	for range 3 {
		if status, out := ts.call(t, "Limit", "", `{"namespace":"tls","identifier":"u","limit":10,"duration":60000}`); status != 200 {
			t.Fatalf("Limit: %d %v", status, out)
		}
	}
	poll.Until(t, 10*time.Second, "the window written to the Redis over mutual TLS", func() bool {
		n, err := r.Do("DBSIZE")
		return err == nil && n != "0" && n != ""
	})
}
