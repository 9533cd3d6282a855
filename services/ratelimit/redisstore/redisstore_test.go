package redisstore

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// TestSlot checks the slot computation against values Redis itself
// gives (CLUSTER KEYSLOT), and that both cells of a window share a slot
// whatever braces the names hold.
func TestSlot(t *testing.T) {
	for key, want := range map[string]uint16{
		"foo":                    12182,
		"123456789":              12739, // CRC16/XMODEM check value 0x31C3
		"{user1000}.following":   slot("user1000"),
		"foo{}{bar}":             slot("foo{}{bar}"), // empty tag: the whole key
		"{a}{b}":                 slot("a"),
		"no closing {brace here": slot("no closing {brace here"),
	} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
	for _, id := range []string{"plain", "with}brace", "with{brace", "}{", "{x}", ""} {
		cur := store.CellKey{Workspace: "ws", Namespace: "n{s}", Identifier: id, Duration: time.Minute, Sequence: 1001}
		prev := cur
		prev.Sequence--
		refunds := cur
		refunds.Refunds = true
		if a, b, c := slot(Key(&cur)), slot(Key(&prev)), slot(Key(&refunds)); a != b || a != c {
			t.Errorf("identifier %q: cells of one window in slots %d and %d", id, a, b)
		}
	}
}

func TestClusterOptions(t *testing.T) {
	opts, err := ClusterOptions("redis+cluster://user:pw@10.0.0.1:7000,10.0.0.2:7001,10.0.0.3:7002?max_redirects=5")
	if err != nil {
		t.Fatal(err)
	}
	if got := opts.Addrs; len(got) != 3 || got[0] != "10.0.0.1:7000" || got[2] != "10.0.0.3:7002" {
		t.Fatalf("seeds = %v", got)
	}
	if opts.Username != "user" || opts.Password != "pw" || opts.MaxRedirects != 5 || opts.MaxRetries != -1 || !opts.ContextTimeoutEnabled {
		t.Fatalf("options = %+v", opts)
	}
	if opts, err := ClusterOptions("rediss+cluster://h:1"); err != nil || opts.TLSConfig == nil {
		t.Fatalf("rediss+cluster: %+v, %v", opts, err)
	}
	for _, bad := range []string{"redis://h:1", "http+cluster://h:1", "redis+cluster://h:1,,h:2", "rediss+cluster://h:1?skip_verify=true"} {
		if _, err := ClusterOptions(bad); err == nil {
			t.Errorf("ClusterOptions(%q) accepted", bad)
		}
	}
}

// TestCertificatesAlwaysChecked: a URL that would turn off the checks of
// Redis's certificate (go-redis's skip_verify) is refused, one server's
// and a cluster's; TLS without it is taken.
func TestCertificatesAlwaysChecked(t *testing.T) {
	if _, err := Options("rediss://h:6380?skip_verify=true"); err == nil || !strings.Contains(err.Error(), "skip_verify") {
		t.Errorf("Options with skip_verify: %v, want refused naming it", err)
	}
	if _, err := ClusterOptions("rediss+cluster://h:1,h:2?skip_verify=true"); err == nil || !strings.Contains(err.Error(), "skip_verify") {
		t.Errorf("ClusterOptions with skip_verify: %v, want refused naming it", err)
	}
	if opts, err := Options("rediss://h:6380"); err != nil || opts.TLSConfig == nil || opts.TLSConfig.InsecureSkipVerify {
		t.Errorf("Options(rediss://h:6380): %+v, %v; want TLS that verifies", opts, err)
	}
}

// client returns a client of the single server r, closed when the test ends.
func client(t testing.TB, r *testserver.Redis) redis.UniversalClient {
	opts, err := Options(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// newStore returns a store on c.
func newStore(t testing.TB, c redis.UniversalClient, opts ...Option) *Store {
	t.Helper()
	o, err := New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// startBackend starts a private Redis, one server ("redis") or a cluster
// of three masters ("cluster"), and returns a client of it; both stop when
// the test ends.
func startBackend(t testing.TB, backend string) redis.UniversalClient {
	t.Helper()
	if backend == "cluster" {
		return clusterClient(t, testserver.StartRedisCluster(t, 3))
	}
	return client(t, testserver.StartRedis(t))
}

// clusterClient returns a client of the cluster c, closed when the test
// ends.
func clusterClient(t testing.TB, c *testserver.RedisCluster) redis.UniversalClient {
	opts, err := ClusterOptions(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(opts)
	t.Cleanup(func() { cc.Close() })
	return cc
}

func TestKeysNeverCollide(t *testing.T) {
	pairs := [][2]store.CellKey{
		{{Workspace: "w", Namespace: "a-b", Identifier: "c"}, {Workspace: "w", Namespace: "a", Identifier: "b-c"}},
		{{Workspace: "w", Namespace: "a:1:b", Identifier: "c"}, {Workspace: "w", Namespace: "a", Identifier: "1:b:c"}},
		{{Workspace: "w:1:a", Namespace: "b", Identifier: "c"}, {Workspace: "w", Namespace: "1:a:b", Identifier: "c"}},
		{{Workspace: "w", Namespace: "n", Identifier: "i:60000:5", Duration: time.Second, Sequence: 1},
			{Workspace: "w", Namespace: "n", Identifier: "i", Duration: time.Minute, Sequence: 5}},
		{{Workspace: "w", Namespace: "n", Identifier: "i}:1"}, {Workspace: "w", Namespace: "n", Identifier: "i", Sequence: 1}},
		{{Workspace: "w", Namespace: "n", Identifier: "j", Sequence: 1}, {Workspace: "w", Namespace: "n", Identifier: "j", Sequence: 1, Refunds: true}},
	}
	o := newStore(t, client(t, testserver.StartRedis(t)))
	ctx := context.Background()
	for _, p := range pairs {
		if Key(&p[0]) == Key(&p[1]) {
			t.Fatalf("%+v and %+v share the key %q", p[0], p[1], Key(&p[0]))
		}
		if _, err := o.Increment(ctx, []store.Increment{{Key: p[0], Delta: 3, TTL: time.Minute}, {Key: p[1], Delta: 5, TTL: time.Minute}}); err != nil {
			t.Fatal(err)
		}
		counts, err := o.Load(ctx, []store.CellKey{p[0], p[1]})
		if err != nil {
			t.Fatal(err)
		}
		if counts[0] != 3 || counts[1] != 5 {
			t.Fatalf("%+v / %+v hold %v in Redis, want [3 5]", p[0], p[1], counts)
		}
	}
}

func TestIncrementSetsTTLAtomically(t *testing.T) {
	r := testserver.StartRedis(t)
	o := newStore(t, client(t, r))
	c := store.CellKey{Workspace: "w", Namespace: "n", Identifier: "i", Duration: time.Minute, Sequence: 7}
	counts, err := o.Increment(context.Background(), []store.Increment{{Key: c, Delta: 2, TTL: 90 * time.Second}})
	if err != nil || counts[0] != 2 {
		t.Fatalf("Increment = %v, %v; want [2]", counts, err)
	}
	// A later increment with a shorter TTL never shortens the expiry.
	if _, err := o.Increment(context.Background(), []store.Increment{{Key: c, Delta: 1, TTL: time.Second}}); err != nil {
		t.Fatal(err)
	}
	pttl, err := r.Do("PTTL", Key(&c))
	if err != nil {
		t.Fatal(err)
	}
	if ms, _ := strconv.Atoi(pttl); ms <= 80_000 || ms > 90_000 {
		t.Fatalf("PTTL = %s ms, want about 90,000", pttl)
	}
	missing, err := o.Load(context.Background(), []store.CellKey{{Workspace: "w", Namespace: "n", Identifier: "nobody", Duration: time.Minute}})
	if err != nil || missing[0] != 0 {
		t.Fatalf("Load of a missing cell = %v, %v; want [0]", missing, err)
	}
}

// TestCorruptValues: a value that is not a count reads as the largest count
// the limiter takes; a negative one as 0; an increment that would overflow,
// or land on a value that is not a count, sets the cell to that largest
// count, answers for it, and fails none of the pipeline's other increments.
func TestCorruptValues(t *testing.T) {
	r := testserver.StartRedis(t)
	o := newStore(t, client(t, r))
	ctx := context.Background()
	cell := func(id string) store.CellKey {
		return store.CellKey{Workspace: "w", Namespace: "n", Identifier: id, Duration: time.Minute, Sequence: 9}
	}
	for id, v := range map[string]string{"junk": "not-a-count", "neg": "-1000", "huge": strconv.FormatInt(math.MaxInt64, 10)} {
		if _, err := r.Do("SET", Key(new(cell(id))), v); err != nil {
			t.Fatal(err)
		}
	}
	counts, err := o.Load(ctx, []store.CellKey{cell("junk"), cell("neg"), cell("huge")})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{store.MaxCount, 0, store.MaxCount}; !slices.Equal(counts, want) {
		t.Fatalf("Load = %v, want %v", counts, want)
	}
	counts, err = o.Increment(ctx, []store.Increment{{Key: cell("huge"), Delta: 5, TTL: time.Minute}, {Key: cell("fine"), Delta: 2, TTL: time.Minute},
		{Key: cell("junk"), Delta: 1, TTL: time.Minute}})
	if err != nil {
		t.Fatalf("Increment: %v", err)
	}
	if want := []int64{store.MaxCount, 2, store.MaxCount}; !slices.Equal(counts, want) {
		t.Fatalf("Increment = %v, want %v", counts, want)
	}
	if v, _ := r.Do("GET", Key(new(cell("huge")))); v != strconv.Itoa(store.MaxCount) {
		t.Fatalf("overflowing cell holds %s, want %d", v, store.MaxCount)
	}
}

// TestClusterMatchesOneServer sends one random sequence of loads and
// increments, over cells of many windows in many slots, to one Redis and to
// a Redis Cluster of three masters: every answer must be the same, so what
// the limiter's simulations show for one server holds for a cluster.
func TestClusterMatchesOneServer(t *testing.T) {
	one := newStore(t, client(t, testserver.StartRedis(t)))
	cluster := newStore(t, clusterClient(t, testserver.StartRedisCluster(t, 3)))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	cellOf := func() store.CellKey {
		return store.CellKey{Workspace: "ws", Namespace: "n", Identifier: "id_" + strconv.Itoa(rng.IntN(40)), Duration: time.Minute, Sequence: 100 + rng.Int64N(2)}
	}
	for step := range 300 {
		n := 1 + rng.IntN(8)
		if rng.IntN(2) == 0 {
			cells := make([]store.CellKey, n)
			for i := range cells {
				cells[i] = cellOf()
			}
			a, errA := one.Load(ctx, cells)
			b, errB := cluster.Load(ctx, cells)
			if errA != nil || errB != nil || !slices.Equal(a, b) {
				t.Fatalf("step %d: Load = %v, %v on one server, %v, %v on the cluster", step, a, errA, b, errB)
			}
			continue
		}
		incs := make([]store.Increment, n)
		for i := range incs {
			incs[i] = store.Increment{Key: cellOf(), Delta: 1 + rng.Int64N(5), TTL: time.Minute}
		}
		a, errA := one.Increment(ctx, incs)
		b, errB := cluster.Increment(ctx, incs)
		if errA != nil || errB != nil || !slices.Equal(a, b) {
			t.Fatalf("step %d: Increment = %v, %v on one server, %v, %v on the cluster", step, a, errA, b, errB)
		}
	}
}

// BenchmarkLoad100Cells reads 100 cells of 50 keys (the two cells of each
// window), as a MultiLimit or a batch of cold keys does: one MGET on one
// server; on a cluster of three masters, one MGET per slot in one pipeline,
// which reaches each master once.
func BenchmarkLoad100Cells(b *testing.B) {
	for _, cluster := range []bool{false, true} {
		name := "redis"
		if cluster {
			name = "cluster"
		}
		b.Run(name, func(b *testing.B) {
			var c redis.UniversalClient
			if cluster {
				c = clusterClient(b, testserver.StartRedisCluster(b, 3))
			} else {
				c = client(b, testserver.StartRedis(b))
			}
			o := newStore(b, c)
			cells := make([]store.CellKey, 0, 100)
			for i := range 50 {
				c := store.CellKey{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i), Duration: time.Minute, Sequence: 1000}
				prev := c
				prev.Sequence--
				cells = append(cells, c, prev)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := o.Load(ctx, cells); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
