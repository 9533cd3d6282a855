package rlsconfig_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/xdsserver"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// Units of the xDS type beyond the four its Go enum names.
const (
	unitMonth = rlsconfv3.RateLimitUnit(5)
	unitYear  = rlsconfv3.RateLimitUnit(6)
	unitWeek  = rlsconfv3.RateLimitUnit(7)
)

func limit(n uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitPolicy {
	return &rlsconfv3.RateLimitPolicy{RequestsPerUnit: n, Unit: unit}
}

// gatewayConfig is a listener's rules as Envoy Gateway's translator writes
// them: the route's descriptor (key and value its name, with '/' and '*'),
// nested rule-N-match-M levels, a distinct match (a key without a value),
// shadow mode on a rule's whole chain, and units past DAY.
func gatewayConfig(domain string, perMonth uint32) *rlsconfv3.RateLimitConfig {
	route := "httproute/default/backend/rule/0/match/0/*"
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: route, Value: route,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "rule-0-match-0", Value: "rule-0-match-0", Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "rule-0-match-1", Value: "rule-0-match-1", RateLimit: limit(5, rlsconfv3.RateLimitUnit_SECOND)}}},
			{Key: "rule-1-match-0", RateLimit: limit(perMonth, unitMonth)},
			{Key: "rule-2-match-0", ShadowMode: true, Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "masked_remote_address", Value: "0.0.0.0/0", ShadowMode: true, RateLimit: limit(1, unitYear)}}},
			{Key: "rule-3-match-0", Value: "internal", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
			{Key: "rule-4-match-0", RateLimit: limit(7, unitWeek)},
		},
	}}}
}

func TestLoadXDS(t *testing.T) {
	c, err := rlsconfig.LoadXDS(gatewayConfig("default/eg/http", 1000))
	if err != nil {
		t.Fatal(err)
	}
	route := "httproute/default/backend/rule/0/match/0/*"
	at := func(kv ...string) []rlsconfig.Entry {
		es := []rlsconfig.Entry{{Key: route, Value: route}}
		for i := 0; i < len(kv); i += 2 {
			es = append(es, rlsconfig.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return es
	}
	for _, tc := range []struct {
		name      string
		entries   []rlsconfig.Entry
		limit     uint32
		window    time.Duration
		shadow    bool
		unlimited bool
	}{
		{"nested matches", at("rule-0-match-0", "rule-0-match-0", "rule-0-match-1", "rule-0-match-1"), 5, time.Second, false, false},
		{"distinct, a month", at("rule-1-match-0", "tenant-a"), 1000, 30 * 24 * time.Hour, false, false},
		{"shadow, a year", at("rule-2-match-0", "x", "masked_remote_address", "0.0.0.0/0"), 1, 365 * 24 * time.Hour, true, false},
		{"unlimited", at("rule-3-match-0", "internal"), 0, 0, false, true},
		{"a week", at("rule-4-match-0", "x"), 7, 7 * 24 * time.Hour, false, false},
	} {
		m, ok := c.Match("default/eg/http", tc.entries)
		if !ok {
			t.Errorf("%s: no match", tc.name)
			continue
		}
		r := m.Rule
		if r.Unlimited != tc.unlimited || r.ShadowMode != tc.shadow {
			t.Errorf("%s: unlimited %v, shadow %v", tc.name, r.Unlimited, r.ShadowMode)
		}
		if !tc.unlimited && (len(r.Limits) != 1 || r.Limits[0].RequestsPerUnit != tc.limit || r.Limits[0].Duration() != tc.window) {
			t.Errorf("%s: limits %+v, want %d per %s", tc.name, r.Limits, tc.limit, tc.window)
		}
	}
	if _, ok := c.Match("default/eg/http", at("rule-0-match-0", "rule-0-match-0")); ok {
		t.Error("a level without a limit matched")
	}
}

func TestLoadXDSErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		configs []*rlsconfv3.RateLimitConfig
		want    string
	}{
		{"no unit", []*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", RateLimit: limit(1, rlsconfv3.RateLimitUnit_UNKNOWN)}}}},
			`xds resource "a": d.k: rate_limit.unit: "" is not one of`},
		{"unknown unit", []*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", RateLimit: limit(1, 9)}}}},
			`xds resource "a": d.k: rate_limit.unit: "9" is not one of`},
		{"unit with unlimited", []*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Unit: rlsconfv3.RateLimitUnit_SECOND}}}}},
			"must not be given when unlimited"},
		{"duplicate descriptor", []*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k"}, {Key: "k"}}}}, `xds resource "a": d.k: duplicate descriptor`},
		{"duplicate domain", []*rlsconfv3.RateLimitConfig{gatewayConfig("d", 1), gatewayConfig("d", 2)},
			`xds resource "d": domain "d" is already defined in xds resource "d"`},
		{"empty domain", []*rlsconfv3.RateLimitConfig{{Name: "a"}}, `xds resource "a": domain: must not be empty`},
	} {
		if _, err := rlsconfig.LoadXDS(tc.configs...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: LoadXDS = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestXDSSource runs the source against go-control-plane's management
// server: the first snapshot in force and acknowledged; a broken one
// refused with its error while the last good rules stay; the server killed
// (the rules stay) and back with a new snapshot, reconnected and in force.
func TestXDSSource(t *testing.T) {
	srv := xdsserver.Start(t, "envoy-ratelimit")
	reg := prometheus.NewRegistry()
	src, err := rlsconfig.NewXDSSource(srv.Addr(), "envoy-ratelimit", rlsconfig.WithXDSRegisterer(reg),
		rlsconfig.WithXDSBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	if d, _ := src.Config().Domains(); d != 0 || src.Loaded() {
		t.Fatalf("before any snapshot: %d domains, loaded %v", d, src.Loaded())
	}
	monthly := func() uint32 { return monthlyOf(src) }
	v1 := srv.Push(gatewayConfig("eg", 100))
	select {
	case <-src.FirstLoad():
	case <-time.After(5 * time.Second):
		t.Fatal("the first snapshot was not loaded")
	}
	if monthly() != 100 {
		t.Fatalf("after version %s: monthly limit %d, want 100", v1, monthly())
	}
	poll.Until(t, 5*time.Second, "the ACK of version 1", func() bool { return srv.Acknowledged(v1) })

	bad := gatewayConfig("eg", 200)
	bad.Descriptors = append(bad.Descriptors, bad.Descriptors[0]) // a duplicate descriptor
	v2 := srv.Push(bad)
	poll.Until(t, 5*time.Second, "the NACK of version 2", func() bool { return srv.Refused(v1, "duplicate descriptor") })
	if monthly() != 100 {
		t.Fatalf("after the refused version %s: monthly %d, want version %s's 100", v2, monthly(), v1)
	}
	time.Sleep(300 * time.Millisecond) // the server sends the refused version again and again
	nacks := 0
	for _, r := range srv.Replies() {
		if r.Error != "" {
			nacks++
		}
	}
	// Compiled once, and answered again at most once a doubling wait
	// (20 ms, 40 ms, …: 4 in 300 ms) however fast the server resends it.
	if errors := loadErrors(t, reg); errors != 1 || nacks > 6 {
		t.Fatalf("version %s refused: compiled %v times, %d NACKs in 300 ms", v2, errors, nacks)
	}

	v3 := srv.Push(gatewayConfig("eg", 300))
	poll.Until(t, 5*time.Second, "version 3 in force", func() bool { return monthly() == 300 && srv.Acknowledged(v3) })

	srv.Stop()
	time.Sleep(300 * time.Millisecond) // several failed reconnections
	if monthly() != 300 {
		t.Fatalf("with the server away the rules changed: monthly %d", monthly())
	}
	v4 := srv.Push(gatewayConfig("eg", 400))
	srv.Restart()
	start := time.Now()
	poll.Until(t, 5*time.Second, "version 4 in force after the server came back", func() bool {
		return monthly() == 400 && srv.Acknowledged(v4)
	})
	t.Logf("reconnected and version %s in force %s after the server came back", v4, time.Since(start).Round(time.Millisecond))
	for _, n := range srv.Nodes() {
		if n != "envoy-ratelimit" {
			t.Errorf("a stream named node %q", n)
		}
	}
}

// loadErrors reads unkey_rls_config_loads_total{result="error"} from reg.
func loadErrors(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "unkey_rls_config_loads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == "error" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// modelMetadata is a descriptor's metadata choosing its limit's model, with
// one more key of the rule's own.
func modelMetadata(t *testing.T, model map[string]any) *structpb.Struct {
	t.Helper()
	md, err := structpb.NewStruct(map[string]any{rlsconfig.ModelMetadataKey: model, "team": "payments"})
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// TestLoadXDSModels: over xDS, whose RateLimitPolicy has no field for a
// model, a descriptor's metadata chooses it: a token bucket with its
// burst, a fixed window, a calendar month in Berlin named by the policy's
// unit. The key is consumed; the rule keeps the rest of its metadata.
func TestLoadXDSModels(t *testing.T) {
	rc := &rlsconfv3.RateLimitConfig{Name: "a", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "bucket", RateLimit: limit(10, rlsconfv3.RateLimitUnit_SECOND),
			Metadata: modelMetadata(t, map[string]any{"algorithm": "token_bucket", "burst": 100})},
		{Key: "fixed", RateLimit: limit(5, rlsconfv3.RateLimitUnit_MINUTE),
			Metadata: modelMetadata(t, map[string]any{"algorithm": "fixed_window"})},
		{Key: "plan", RateLimit: limit(10_000, unitMonth),
			Metadata: modelMetadata(t, map[string]any{"calendar": map[string]any{"time_zone": "Europe/Berlin"}})},
		{Key: "year", RateLimit: limit(12, unitYear),
			Metadata: modelMetadata(t, map[string]any{"calendar": map[string]any{"unit": "YEAR", "time_zone": "Asia/Tokyo"}})},
		{Key: "plain", RateLimit: limit(1, rlsconfv3.RateLimitUnit_HOUR)},
	}}
	c, err := rlsconfig.LoadXDS(rc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key, model string
		burst      int64
		zone       string
	}{
		{"bucket", "token_bucket", 100, ""},
		{"fixed", "fixed_window", 0, ""},
		{"plan", "calendar", 0, "Europe/Berlin"},
		{"year", "calendar", 0, "Asia/Tokyo"},
		{"plain", "sliding_window", 0, ""},
	} {
		m, ok := c.Match("d", []rlsconfig.Entry{{Key: tc.key, Value: "v"}})
		if !ok || len(m.Rule.Limits) != 1 {
			t.Fatalf("%s: no rule", tc.key)
		}
		l := m.Rule.Limits[0]
		if l.Model() != tc.model || l.Burst != tc.burst || l.Calendar.TimeZone() != tc.zone {
			t.Errorf("%s: %s, burst %d, zone %q; want %s, %d, %q", tc.key, l.Model(), l.Burst, l.Calendar.TimeZone(), tc.model, tc.burst, tc.zone)
		}
		if want := map[string]string{"plan": "month", "year": "year"}[tc.key]; want != "" && l.Calendar.Unit().String() != want {
			t.Errorf("%s: a calendar of %s, want the policy's %s", tc.key, l.Calendar.Unit(), want)
		}
		md := m.Rule.Metadata.AsMap()
		if tc.key != "plain" && (md["team"] != "payments" || md[rlsconfig.ModelMetadataKey] != nil) {
			t.Errorf("%s: the rule's metadata %v, want the team's key and not the model's", tc.key, md)
		}
	}
}

func TestLoadXDSModelErrors(t *testing.T) {
	notStruct, _ := structpb.NewStruct(map[string]any{rlsconfig.ModelMetadataKey: "token_bucket"})
	for _, tc := range []struct {
		name string
		d    *rlsconfv3.RateLimitDescriptor
		want string
	}{
		{"unknown algorithm", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, rlsconfv3.RateLimitUnit_SECOND),
			Metadata: modelMetadata(t, map[string]any{"algorithm": "leaky"})}, `rate_limit.algorithm: "leaky" is not one of`},
		{"burst of a window", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, rlsconfv3.RateLimitUnit_SECOND),
			Metadata: modelMetadata(t, map[string]any{"burst": 5})}, "rate_limit.burst: must be given only with algorithm token_bucket"},
		{"fractional burst", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, rlsconfv3.RateLimitUnit_SECOND),
			Metadata: modelMetadata(t, map[string]any{"algorithm": "token_bucket", "burst": 1.5})}, `d.k: metadata.unkey.ratelimit.burst: must be a whole number from 0 (requests_per_unit) to 4294967295`},
		{"unknown field", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, rlsconfv3.RateLimitUnit_SECOND),
			Metadata: modelMetadata(t, map[string]any{"algoritm": "token_bucket"})}, `metadata.unkey.ratelimit.algoritm: unknown field`},
		{"a key in capitals", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, rlsconfv3.RateLimitUnit_SECOND),
			Metadata: modelMetadata(t, map[string]any{"ALGORITHM": "token_bucket"})}, `metadata.unkey.ratelimit.ALGORITHM: unknown field`},
		{"null algorithm", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, rlsconfv3.RateLimitUnit_SECOND),
			Metadata: modelMetadata(t, map[string]any{"algorithm": nil})}, `metadata.unkey.ratelimit.algorithm: must be a string`},
		{"a calendar unit beside another policy unit", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(10, rlsconfv3.RateLimitUnit_SECOND),
			Metadata: modelMetadata(t, map[string]any{"calendar": map[string]any{"unit": "year"}})}, `metadata.unkey.ratelimit.calendar.unit: "year" differs from the policy's unit "second"`},
		{"nested, named by its path", &rlsconfv3.RateLimitDescriptor{Key: "p", Value: "pv", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", Value: "v", RateLimit: limit(1, rlsconfv3.RateLimitUnit_SECOND), Metadata: modelMetadata(t, map[string]any{"burst": "5"})}}},
			`xds resource "a": d.p_pv.k_v: metadata.unkey.ratelimit.burst: must be a whole number`},
		{"calendar of seconds", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, rlsconfv3.RateLimitUnit_SECOND),
			Metadata: modelMetadata(t, map[string]any{"calendar": map[string]any{}})}, `rate_limit.calendar.unit: "second" is not one of day, week, month, year`},
		{"bad zone", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, unitMonth),
			Metadata: modelMetadata(t, map[string]any{"calendar": map[string]any{"time_zone": "Mars/Olympus"}})}, "calendar.time_zone"},
		{"no rate_limit", &rlsconfv3.RateLimitDescriptor{Key: "k",
			Metadata: modelMetadata(t, map[string]any{"algorithm": "fixed_window"})}, "metadata.unkey.ratelimit: chooses the model of the descriptor's rate_limit, which it lacks"},
		{"not a struct", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, rlsconfv3.RateLimitUnit_SECOND),
			Metadata: notStruct}, "metadata.unkey.ratelimit: must be a struct"},
	} {
		rc := &rlsconfv3.RateLimitConfig{Name: "a", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{tc.d}}
		if _, err := rlsconfig.LoadXDS(rc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: LoadXDS = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestXDSSourceBoundsAndFlapping: a management server's configuration
// past a bound (descriptors nested 9,000 deep) is NACKed naming the bound,
// and the last good rules stay; a server that then flaps between two good
// configurations under new versions, twenty times, has each compiled once.
func TestXDSSourceBoundsAndFlapping(t *testing.T) {
	srv := xdsserver.Start(t, "envoy-ratelimit")
	reg := prometheus.NewRegistry()
	src, err := rlsconfig.NewXDSSource(srv.Addr(), "envoy-ratelimit", rlsconfig.WithXDSRegisterer(reg),
		rlsconfig.WithXDSBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	monthly := func() uint32 { return monthlyOf(src) }
	v1 := srv.Push(gatewayConfig("eg", 100))
	poll.Until(t, 5*time.Second, "version 1 in force", func() bool { return monthly() == 100 && srv.Acknowledged(v1) })

	deep := gatewayConfig("eg", 200)
	d := deep.Descriptors[0]
	for range 9000 {
		d = &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
	}
	deep.Descriptors = append(deep.Descriptors, d)
	v2 := srv.Push(deep)
	poll.Until(t, 5*time.Second, "the NACK of the nested version", func() bool { return srv.Refused(v1, "UNKEY_RLS_MAX_DEPTH") })
	if monthly() != 100 {
		t.Fatalf("after the refused version %s: monthly %d, want version %s's 100", v2, monthly(), v1)
	}

	var last string
	for i := range 20 {
		last = srv.Push(gatewayConfig("eg", uint32(300+100*(i%2))))
		poll.Until(t, 5*time.Second, "the ACK of a flapping version", func() bool { return srv.Acknowledged(last) })
	}
	if monthly() != 400 {
		t.Fatalf("after flapping, version %s: monthly %d, want 400", last, monthly())
	}
	// Compiled: version 1, the nested one, and the two flapping ones.
	if ok, errs := loads(t, reg, "ok"), loads(t, reg, "error"); ok != 3 || errs != 1 {
		t.Fatalf("compiled %v good and %v refused configurations; want 3 and 1 (each distinct content once)", ok, errs)
	}
}

// loads returns the source's loads of result.
func loads(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "unkey_rls_config_loads_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// monthlyOf returns the monthly limit of gatewayConfig's rule in src's
// rules in force, 0 when there is none.
func monthlyOf(src *rlsconfig.XDSSource) uint32 {
	m, ok := src.Config().Match("eg", []rlsconfig.Entry{{Key: "httproute/default/backend/rule/0/match/0/*",
		Value: "httproute/default/backend/rule/0/match/0/*"}, {Key: "rule-1-match-0", Value: "t"}})
	if !ok {
		return 0
	}
	return m.Rule.Limits[0].RequestsPerUnit
}
