package e2e

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkScaling measures how a server's CPU per call grows with the
// cores it runs on. For each CPU list in SCALING_CPUS (taskset's lists,
// separated by spaces; "0 0-1" by default, "0" on a machine of one CPU),
// the floors of BenchmarkFloors and the API run pinned to those CPUs (Go
// sizes GOMAXPROCS by them), all started at once; each kind of call is
// then measured on every list's server, one after another, before the
// next kind, so that a shared machine's drift during the run falls on the
// lists alike. A result is named by the number of cores. Compare a list's
// server-µs/op with the first list's, and the API's growth with its
// transport's floor's: what grows in both is the transport's and Go's
// runtime's, not the service's.
//
// The client is this process: on a machine of few cores it shares them
// with the servers; on a many-core one pin it apart, e.g.
//
//	SCALING_CPUS="0 0-1 0-3 0-7" taskset -c 8-15 go test -run '^$' -bench Scaling -benchtime 100000x ./e2e
func BenchmarkScaling(b *testing.B) {
	lists := strings.Fields(os.Getenv("SCALING_CPUS"))
	if len(lists) == 0 {
		lists = []string{"0", "0-1"}
		if runtime.NumCPU() < 2 {
			lists = lists[:1]
		}
	}
	cores := make([]int, len(lists))
	for i, cpus := range lists {
		cores[i] = countCPUs(b, cpus)
	}
	floors := make([]*floorProcess, len(lists))
	apis := make([]*floorProcess, len(lists))
	for i, cpus := range lists {
		floors[i], apis[i] = startFloorServer(b, cpus), startFloorAPI(b, cpus)
	}
	// caller is what BenchmarkFloors' callers are, for a process.
	type caller = func(p *floorProcess) func(b *testing.B) func(i int64) error
	for _, c := range []struct {
		name string
		api  bool // the API is called, else the floor
		call caller
	}{
		{"grpc/floor-grpc-go", false, func(p *floorProcess) func(b *testing.B) func(i int64) error {
			return grpcCaller(p.addrs["grpc"], false)
		}},
		{"grpc/api-grpc-go-port", true, func(p *floorProcess) func(b *testing.B) func(i int64) error {
			return grpcCaller(p.grpcAddr, true)
		}},
		{"http1-json/floor-net-http", false, func(p *floorProcess) func(b *testing.B) func(i int64) error {
			return jsonCaller("http://"+p.addrs["http"]+"/v2/ratelimit.limit", v2Body)
		}},
		{"http1-json/api-v2", true, func(p *floorProcess) func(b *testing.B) func(i int64) error {
			return jsonCaller("http://"+p.addr+"/v2/ratelimit.limit", v2Body)
		}},
		{"http1-json/api-connect", true, func(p *floorProcess) func(b *testing.B) func(i int64) error {
			return jsonCaller("http://"+p.addr+"/ratelimit.v1.RatelimitService/Limit", connectBody)
		}},
		{"http1-json/api-envoy-json", true, func(p *floorProcess) func(b *testing.B) func(i int64) error {
			return jsonCaller("http://"+p.addr+"/json", envoyBody)
		}},
	} {
		for i := range lists {
			p := floors[i]
			if c.api {
				p = apis[i]
			}
			b.Run(c.name+"/cores="+strconv.Itoa(cores[i]), func(b *testing.B) { measureCalls(b, c.call(p)(b), p.cmd.Process.Pid) })
		}
	}
}

// countCPUs returns how many CPUs a taskset list (e.g. "0,2-3") names.
func countCPUs(b *testing.B, list string) int {
	n := 0
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		from, err1 := strconv.Atoi(lo)
		to, err2 := from, error(nil)
		if isRange {
			to, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || to < from {
			b.Fatalf("SCALING_CPUS: %q is not a CPU list of taskset's", list)
		}
		n += to - from + 1
	}
	return n
}
