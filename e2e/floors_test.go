package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// floorToken is the API's token in BenchmarkFloors.
const floorToken = "tok_floor_0123456789abcdef"

// BenchmarkFloors measures what each transport costs a call alone beside
// what the API costs on it, as server CPU per call: on each, an empty
// handler (e2e/floorserver) and the API (bin/api, in memory, a token
// checked, Envoy rules loaded) run as processes of their own, called by
// the same client from this process with 32 concurrent calls (one
// connection for gRPC, a pool for HTTP/1.1) over 1,000 keys whose limit
// never denies (FLOORS_API_ENV adds settings to the API's environment
// alone). server-µs/op is the server process's user and system CPU
// (from /proc, 10 ms ticks: run thousands of calls) divided by the calls;
// the ratio of a server to its transport's floor is the point, since the
// client shares the machine. Run with -benchtime 20000x or more, e.g.
//
//	go test -run '^$' -bench Floors -benchtime 30000x ./e2e
func BenchmarkFloors(b *testing.B) {
	floor := startFloorServer(b, "")
	api := startFloorAPI(b, "")
	for _, c := range []struct {
		name   string
		server *exec.Cmd
		call   func(b *testing.B) func(i int64) error
	}{
		{"grpc/floor-grpc-go", floor.cmd, grpcCaller(floor.addrs["grpc"], false)},
		{"grpc/api-grpc-go-port", api.cmd, grpcCaller(api.grpcAddr, true)},
		{"grpc/floor-connect-go-h2c", floor.cmd, grpcCaller(floor.addrs["h2c"], false)},
		{"grpc/api-main-port", api.cmd, grpcCaller(api.addr, true)},
		{"http1-json/floor-net-http", floor.cmd, jsonCaller("http://"+floor.addrs["http"]+"/v2/ratelimit.limit", v2Body)},
		{"http1-json/api-v2", api.cmd, jsonCaller("http://"+api.addr+"/v2/ratelimit.limit", v2Body)},
		{"http1-json/floor-connect-go", floor.cmd, jsonCaller("http://"+floor.addrs["h2c"]+"/ratelimit.v1.RatelimitService/Limit", connectBody)},
		{"http1-json/api-connect", api.cmd, jsonCaller("http://"+api.addr+"/ratelimit.v1.RatelimitService/Limit", connectBody)},
		{"http1-json/api-envoy-json", api.cmd, jsonCaller("http://"+api.addr+"/json", envoyBody)},
	} {
		b.Run(c.name, func(b *testing.B) { measureCalls(b, c.call(b), c.server.Process.Pid) })
	}
}

// measureCalls warms call, then makes b.N calls from about 32 goroutines
// and reports the CPU (user and system, from /proc) the server process and
// any store processes used per call, and the calls a second. Beside the
// server's CPU it reports, per call, its system CPU alone, its read and
// write system calls and its threads' context switches (see
// processUsage): counts a shared machine's noise moves far less than CPU
// time, which say where a change in the CPU comes from.
func measureCalls(b *testing.B, call func(i int64) error, server int, stores ...int) {
	for i := range int64(200) { // warm the connections and the keys
		if err := call(i); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	// RunParallel starts this many goroutines a GOMAXPROCS: 32 in all, or
	// the nearest multiple of GOMAXPROCS (one each beyond 64).
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism(max(1, (32+procs/2)/procs))
	before := usage(b, server)
	storesBefore := make([]time.Duration, len(stores))
	for i, pid := range stores {
		storesBefore[i] = processCPU(b, pid)
	}
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := call(next.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	elapsed := time.Since(start)
	used := usage(b, server).since(before)
	perCall := func(n float64) float64 { return n / float64(b.N) }
	b.ReportMetric(perCall(float64((used.user + used.sys).Microseconds())), "server-µs/op")
	b.ReportMetric(perCall(float64(used.sys.Microseconds())), "server-sys-µs/op")
	b.ReportMetric(perCall(float64(used.syscalls)), "server-rw/op")
	b.ReportMetric(perCall(float64(used.switches)), "server-ctxsw/op")
	if len(stores) > 0 {
		var store time.Duration
		for i, pid := range stores {
			store += processCPU(b, pid) - storesBefore[i]
		}
		b.ReportMetric(float64(store.Microseconds())/float64(b.N), "store-µs/op")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
}

// floorProcess is a server process of BenchmarkFloors.
type floorProcess struct {
	cmd      *exec.Cmd
	addrs    map[string]string // the floor server's, by transport
	addr     string            // the API's main port
	grpcAddr string            // the API's grpc-go port
}

// startFloorServer builds and starts e2e/floorserver (or the one among
// the binaries built already, see TestMain), on cpus if it is not "" (see
// serverCommand), and reads its ports.
func startFloorServer(b *testing.B, cpus string) *floorProcess {
	binary := filepath.Join(bin, "floorserver")
	if _, err := os.Stat(binary); err != nil {
		binary = filepath.Join(b.TempDir(), "floorserver")
		if out, err := exec.Command("go", "build", "-o", binary, "./floorserver").CombinedOutput(); err != nil {
			b.Fatalf("build floorserver: %v\n%s", err, out)
		}
	}
	cmd := serverCommand(cpus, binary)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("floorserver's ports: %v", err)
	}
	p := &floorProcess{cmd: cmd, addrs: map[string]string{}}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		p.addrs[k] = v
	}
	return p
}

// startFloorAPI starts bin/api in memory with a token, Envoy rules for
// /json and the grpc-go port, and the settings in env, on cpus if it is
// not "" (see serverCommand), and waits until it is ready.
func startFloorAPI(b *testing.B, cpus string, env ...string) *floorProcess {
	dir := b.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000000000}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	port, grpcPort := testserver.FreePort(b), testserver.FreePort(b)
	cmd := serverCommand(cpus, filepath.Join(bin, "api"))
	cmd.Env = append(os.Environ(), "UNKEY_REGION=bench", "UNKEY_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(port),
		"UNKEY_GRPC_ADDR=127.0.0.1:"+strconv.Itoa(grpcPort), "UNKEY_AUTH_TOKENS="+floorToken+"=ws_bench",
		"UNKEY_RLS_CONFIG="+rules, "UNKEY_LOG_LEVEL=warn")
	// FLOORS_API_ENV adds to the API's environment alone (a setting or a
	// GODEBUG to compare): the floors keep theirs.
	cmd.Env = append(append(cmd.Env, env...), strings.Fields(os.Getenv("FLOORS_API_ENV"))...)
	return startServing(b, cmd, port, grpcPort, "/readyz")
}

// startServing starts cmd, a server listening on loopback's port and
// grpcPort, kills it when the benchmark ends, and waits until GET
// readyPath answers 200.
func startServing(b *testing.B, cmd *exec.Cmd, port, grpcPort int, readyPath string) *floorProcess {
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := &floorProcess{cmd: cmd, addr: "127.0.0.1:" + strconv.Itoa(port), grpcAddr: "127.0.0.1:" + strconv.Itoa(grpcPort)}
	poll.Until(b, 30*time.Second, cmd.Path+" to answer "+readyPath, func() bool { return get("http://"+p.addr+readyPath) == http.StatusOK })
	return p
}

// serverCommand returns the command that runs a server of the benchmarks,
// on the CPUs cpus lists (taskset's list, e.g. "0" or "0-3") unless it is
// "": Go sizes GOMAXPROCS by the CPUs a process may use.
func serverCommand(cpus, name string, args ...string) *exec.Cmd {
	if cpus != "" {
		return exec.Command("taskset", append([]string{"-c", cpus, name}, args...)...)
	}
	return exec.Command(name, args...)
}

// processCPU returns the user and system CPU time pid has used.
func processCPU(b *testing.B, pid int) time.Duration {
	u := usage(b, pid)
	return u.user + u.sys
}

// processUsage is what a process has used since it started.
type processUsage struct {
	user, sys time.Duration // CPU time, from /proc/pid/stat (clock ticks of 10 ms)
	syscalls  int64         // read and write system calls (/proc/pid/io's syscr and syscw)
	switches  int64         // times a thread left its CPU, to wait or preempted (voluntary and involuntary context switches)
}

// since returns what u used after earlier.
func (u processUsage) since(earlier processUsage) processUsage {
	return processUsage{u.user - earlier.user, u.sys - earlier.sys, u.syscalls - earlier.syscalls, u.switches - earlier.switches}
}

// usage reads what pid has used from /proc. A thread that ended takes its
// context switches with it: Go's threads seldom end.
func usage(b *testing.B, pid int) processUsage {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's name, which is in parentheses.
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	u := processUsage{user: time.Duration(utime) * 10 * time.Millisecond, sys: time.Duration(stime) * 10 * time.Millisecond}
	u.syscalls = procFields(b, fmt.Sprintf("/proc/%d/io", pid), "syscr", "syscw")
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, task := range tasks {
		u.switches += procFields(b, fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()), "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
	}
	return u
}

// procFields returns the sum of the fields named keys in a /proc file of
// "key: number" lines, 0 if the file is gone (a thread that ended).
func procFields(b *testing.B, path string, keys ...string) int64 {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		b.Fatal(err)
	}
	var sum int64
	for line := range strings.Lines(string(raw)) {
		k, v, _ := strings.Cut(line, ":")
		if slices.Contains(keys, k) {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatalf("%s: %q", path, line)
			}
			sum += n
		}
	}
	return sum
}

// grpcCaller returns a caller of ratelimit.v1.RatelimitService/Limit on
// addr, with the API's token if auth, over one grpc-go connection, as one
// Envoy opens, or FLOORS_GRPC_CONNS of them taken in turn, as a fleet of
// Envoys does (fewer calls share each connection's reads and writes).
func grpcCaller(addr string, auth bool) func(b *testing.B) func(i int64) error {
	return func(b *testing.B) func(i int64) error {
		n := 1
		if v := os.Getenv("FLOORS_GRPC_CONNS"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 1 {
				b.Fatalf("FLOORS_GRPC_CONNS=%q: want a number of connections, 1 or more", v)
			}
		}
		var conns []*grpc.ClientConn
		for range n {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { conn.Close() })
			conns = append(conns, conn)
		}
		ctx := context.Background()
		if auth {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+floorToken)
		}
		return func(i int64) error {
			conn := conns[int(i)%n]
			req := &ratelimitv1.LimitRequest{Namespace: "bench", Identifier: "user_" + strconv.FormatInt(i%1000, 10), Limit: 1 << 40, Duration: 60_000}
			var resp ratelimitv1.LimitResponse
			if err := conn.Invoke(ctx, "/ratelimit.v1.RatelimitService/Limit", req, &resp); err != nil {
				return err
			}
			if !resp.Success {
				return fmt.Errorf("denied: %v", &resp)
			}
			return nil
		}
	}
}

// The JSON bodies of the HTTP/1.1 calls, for key i.
func v2Body(i int64) string {
	return `{"namespace":"bench","identifier":"user_` + strconv.FormatInt(i%1000, 10) + `","limit":1099511627776,"duration":60000}`
}

func connectBody(i int64) string {
	return `{"namespace":"bench","identifier":"user_` + strconv.FormatInt(i%1000, 10) + `","limit":"1099511627776","duration":"60000"}`
}

func envoyBody(i int64) string {
	return `{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"user_` + strconv.FormatInt(i%1000, 10) + `"}]}]}`
}

// jsonCaller returns a caller that posts body(i) to url over HTTP/1.1
// with the API's token and expects 200.
func jsonCaller(url string, body func(i int64) string) func(b *testing.B) func(i int64) error {
	return func(b *testing.B) func(i int64) error {
		var protocols http.Protocols
		protocols.SetHTTP1(true)
		client := &http.Client{Transport: &http.Transport{Protocols: &protocols, MaxIdleConnsPerHost: 256}}
		b.Cleanup(client.CloseIdleConnections)
		return func(i int64) error {
			req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body(i)))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+floorToken)
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %d %s", url, resp.StatusCode, raw)
			}
			return nil
		}
	}
}
