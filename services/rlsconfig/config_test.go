package rlsconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit"
)

func entries(kv ...string) []Entry {
	var es []Entry
	for i := 0; i < len(kv); i += 2 {
		es = append(es, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// TestExamples matches descriptors against envoyproxy/ratelimit's eleven
// worked examples (testdata/examples, loaded as one directory).
func TestExamples(t *testing.T) {
	c, err := LoadPath("testdata/examples")
	if err != nil {
		t.Fatal(err)
	}
	if d, r := c.Domains(); d != 11 || r != 21 {
		t.Fatalf("Domains() = %d, %d; want 11 domains, 21 rules", d, r)
	}
	type want struct {
		match  bool
		limit  uint32
		unit   Unit
		path   string
		metric string
		id     string
	}
	for _, tc := range []struct {
		name    string
		domain  string
		entries []Entry
		want    want
	}{
		{"1 value", "mongo_cps", entries("database", "users"), want{true, 500, UnitSecond, "mongo_cps.database_users", "", "database=users"}},
		{"1 unknown value", "mongo_cps", entries("database", "orders"), want{}},
		{"2 nested", "messaging", entries("message_type", "marketing", "to_number", "2061111111"),
			want{true, 5, UnitDay, "messaging.message_type_marketing.to_number", "", "message_type=marketing,to_number=2061111111"}},
		{"2 key only", "messaging", entries("to_number", "2061111111"), want{true, 100, UnitDay, "messaging.to_number", "", "to_number=2061111111"}},
		{"2 placeholder has no limit", "messaging", entries("message_type", "marketing"), want{}},
		{"3 generic", "edge_proxy_per_ip", entries("remote_address", "50.0.0.1"), want{true, 10, UnitSecond, "edge_proxy_per_ip.remote_address", "", "remote_address=50.0.0.1"}},
		{"3 most specific first", "edge_proxy_per_ip", entries("remote_address", "50.0.0.5"), want{true, 0, UnitSecond, "edge_proxy_per_ip.remote_address_50.0.0.5", "", "remote_address=50.0.0.5"}},
		{"4 depth must match", "example4", entries("key", "value"), want{}},
		{"4 nested", "example4", entries("key", "value", "subkey", "subvalue"), want{true, 300, UnitSecond, "example4.key_value.subkey", "", "key=value,subkey=subvalue"}},
		{"4 longer than the tree", "example4", entries("key", "value", "subkey", "subvalue", "more", "x"), want{}},
		{"5 limited", "internal", entries("azure", "x"), want{true, 100, UnitMinute, "internal.azure", "", "azure=x"}},
		{"6 shadow", "example6", entries("service", "auth-service", "user", "user-a"), want{true, 10, UnitSecond, "example6.service.user_user-a", "", "service=auth-service,user=user-a"}},
		{"6 enforced", "example6", entries("service", "auth-service", "user", "user-b"), want{true, 20, UnitSecond, "example6.service.user_user-b", "", "service=auth-service,user=user-b"}},
		{"8 detailed", "example8", entries("key1", "unspecified_value"), want{true, 10, UnitMinute, "example8.key1", "example8.key1_unspecified_value", "key1=unspecified_value"}},
		{"8 value", "example8", entries("key1", "value1"), want{true, 20, UnitMinute, "example8.key1_value1", "", "key1=value1"}},
		{"9 trailing", "example9", entries("key1", "valueXYZ"), want{true, 20, UnitMinute, "example9.key1_value*", "", "key1=valueXYZ"}},
		{"9 trailing, empty run", "example9", entries("key1", "value"), want{true, 20, UnitMinute, "example9.key1_value*", "", "key1=value"}},
		{"9 middle", "example9", entries("path", "/api/123/action"), want{true, 20, UnitMinute, "example9.path_/api/*/action", "", "path=/api/123/action"}},
		{"9 middle, other suffix", "example9", entries("path", "/api/123/other"), want{}},
		{"9 two", "example9", entries("route", "/api/v1/resource/123/action"), want{true, 20, UnitMinute, "example9.route_/api/*/resource/*/action", "", "route=/api/v1/resource/123/action"}},
		{"9 two, parts out of order", "example9", entries("route", "/api/resource/v1/action"), want{}},
		{"10 value_to_metric", "example10", entries("route", "api", "http_method", "GET", "subject_id", "123"),
			want{true, 60, UnitMinute, "example10.route.http_method.subject_id", "example10.route_api.http_method_GET.subject_id", "route=api,http_method=GET,subject_id=123"}},
		{"11 shared", "example11", entries("files", "files/a.pdf"), want{true, 10, UnitHour, "example11.files_files/*", "", "files=files/*"}},
		{"11 not shared", "example11", entries("files_no_share", "files_no_share/a.pdf"), want{true, 10, UnitHour, "example11.files_no_share_files_no_share/*", "", "files_no_share=files_no_share/a.pdf"}},
		{"unknown domain", "nope", entries("database", "users"), want{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := c.Match(tc.domain, tc.entries)
			if ok != tc.want.match {
				t.Fatalf("Match = %v, want %v", ok, tc.want.match)
			}
			if !ok {
				return
			}
			metric := tc.want.metric
			if metric == "" {
				metric = tc.want.path
			}
			if ruleLimit(m.Rule).RequestsPerUnit != tc.want.limit || ruleLimit(m.Rule).Unit != tc.want.unit || m.Rule.Path != tc.want.path ||
				m.Metric != metric || m.Identifier != tc.want.id {
				t.Errorf("Match = {%d %v %q metric %q id %q}, want {%d %v %q metric %q id %q}",
					ruleLimit(m.Rule).RequestsPerUnit, ruleLimit(m.Rule).Unit, m.Rule.Path, m.Metric, m.Identifier,
					tc.want.limit, tc.want.unit, tc.want.path, metric, tc.want.id)
			}
		})
	}
	if m, _ := c.Match("internal", entries("ldap", "x")); m.Rule == nil || !m.Rule.Unlimited {
		t.Errorf("example 5: ldap is not unlimited: %+v", m.Rule)
	}
	if m, _ := c.Match("example6", entries("service", "s", "user", "user-a")); !m.Rule.ShadowMode {
		t.Errorf("example 6: user-a is not in shadow mode")
	}
	specific, _ := c.Match("example7", entries("key_1", "value_1", "user", "bkthomps"))
	replacing, _ := c.Match("example7", entries("key_2", "value_2", "user", "bkthomps"))
	if specific.Rule.Name != "specific_limit" || len(replacing.Rule.Replaces) != 1 || replacing.Rule.Replaces[0] != "specific_limit" {
		t.Errorf("example 7: name %q, replaces %q", specific.Rule.Name, replacing.Rule.Replaces)
	}
}

// TestIdentifiersDoNotAlias: descriptors that differ get different
// counters, whatever their keys and values hold.
func TestIdentifiersDoNotAlias(t *testing.T) {
	c, err := Load(File{Name: "x.yaml", Data: []byte(`
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a,b=c
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: f
    value: x*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
`)})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string][]Entry{}
	for _, es := range [][]Entry{
		entries("a", "x", "b", "y"),
		entries("a", "x,b=y"),
		entries("a,b=c", "x"),
		entries("a", "x=", "b", "y"),
		entries("f", "x1"),
		entries("a,b=c", "x*"),
	} {
		m, ok := c.Match("d", es)
		if !ok {
			if len(es) == 1 && es[0].Key == "a" {
				continue // a alone has no rule
			}
			t.Fatalf("%v: no match", es)
		}
		if prev, dup := seen[m.Identifier]; dup {
			t.Errorf("%v and %v share counter %q", prev, es, m.Identifier)
		}
		seen[m.Identifier] = es
	}
	if m, _ := c.Match("d", entries("a,b=c", "x*")); m.Identifier != "a%2Cb%3Dc=x%2A" {
		t.Errorf("escaped identifier = %q", m.Identifier)
	}
	if m, _ := c.Match("d", entries("a,b=c", "tab\there\u0085")); m.Identifier != "a%2Cb%3Dc=tab%09here%C2%85" {
		t.Errorf("control characters: identifier = %q", m.Identifier)
	}
	shared1, _ := c.Match("d", entries("f", "x1"))
	shared2, _ := c.Match("d", entries("f", "xyz"))
	if shared1.Identifier != shared2.Identifier {
		t.Errorf("share_threshold: %q and %q differ", shared1.Identifier, shared2.Identifier)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"bad yaml", "domain: [", "bad.yaml: "},
		{"unknown key", "domain: d\ndescriptors:\n  - key: a\n    rate_limt: {unit: second}\n", "field rate_limt not found"},
		{"empty domain", "descriptors:\n  - key: a\n", "domain: must not be empty"},
		{"empty key", "domain: d\ndescriptors:\n  - value: a\n", "d: a descriptor has an empty key"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: a\n  - key: a\n", "d.a: duplicate descriptor"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", `d.a: rate_limit.unit: "fortnight" is not one of`},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", "must not be given when unlimited"},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", "an entry has no name"},
		{"replaces self", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n", "must not name the rule itself"},
		{"share without wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n", "share_threshold can only be used with a wildcard"},
		{"negative limit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			`bad.yaml: line 4: got the number "-1", want a whole number from 0 to 4294967295`},
		{"a word for a limit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: lots\n",
			`bad.yaml: line 6: got the string "lots", want a whole number from 0 to 4294967295`},
		{"a mapping for a list", "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      unit: second\n",
			"bad.yaml: line 5: got a mapping (key: value lines), want a list (- lines)"},
		{"a word for a flag", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n", `bad.yaml: line 4: got the string "maybe", want true or false`},
		{"long domain", "domain: " + strings.Repeat("d", 250) + "\n", "domain: must be 1 to 249 bytes"},
		{"same window twice", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    rate_limits: [{unit: second, requests_per_unit: 60, unit_multiplier: 60}]\n",
			"d.a: rate_limits: two limits span 1m0s"},
		{"multiplier 0", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, unit_multiplier: 0}\n",
			"d.a: rate_limit.unit_multiplier: must be 1 to 527040 for unit minute"},
		{"window over a year", "domain: d\ndescriptors:\n  - key: a\n    rate_limits: [{unit: month, requests_per_unit: 1, unit_multiplier: 13}]\n",
			"d.a: rate_limits[0].unit_multiplier: must be 1 to 12 for unit month (a window spans at most 366 days)"},
		{"unknown key in rate_limits", "domain: d\ndescriptors:\n  - key: a\n    rate_limits: [{unit: minute, requests_per_unit: 1, unlimited: true}]\n",
			"field unlimited not found"},
		{"unlimited with more limits", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true}\n    rate_limits: [{unit: minute, requests_per_unit: 1}]\n",
			"d.a: rate_limits: must not be given when rate_limit.unlimited is true"},
		{"lease over an hour", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, unit_multiplier: 2, requests_per_unit: 5, algorithm: concurrency}\n",
			"d.a: rate_limit.unit: a concurrency limit's unit (times unit_multiplier) is its lease, 1 s to 1 h; is 2h0m0s"},
		{"concurrency with a calendar", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 5, algorithm: concurrency, calendar: {unit: day}}\n",
			"d.a: rate_limit.calendar: must not be given with algorithm concurrency"},
		{"concurrency beside another limit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: concurrency}\n    rate_limits: [{unit: second, requests_per_unit: 60}]\n",
			"d.a: rate_limits: a concurrency limit must be its descriptor's only limit"},
		{"rate_limits without unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limits: [{requests_per_unit: 1}]\n",
			`d.a: rate_limits[0].unit: "" is not one of`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(File{Name: "bad.yaml", Data: []byte(tc.yaml)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	c, err := Load(File{Name: "ok.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 20, algorithm: concurrency}\n")})
	if m, ok := c.Match("d", []Entry{{Key: "a", Value: "x"}}); err != nil || !ok || m.Rule.Limits[0].Algorithm != ratelimit.Concurrency ||
		m.Rule.Limits[0].Model() != "concurrency" || m.Rule.Limits[0].Duration() != time.Minute {
		t.Errorf("a concurrency rule: %v, %+v", err, m.Rule)
	}
	_, err = Load(File{Name: "a.yaml", Data: []byte("domain: d\n")}, File{Name: "b.yaml", Data: []byte("domain: d\n")})
	if err == nil || !strings.Contains(err.Error(), `b.yaml: domain "d" is already defined in a.yaml`) {
		t.Errorf("duplicate domain: %v", err)
	}
	c, err = Load(File{Name: "multi.yaml", Data: []byte("domain: a\n---\ndomain: b\n---\n")})
	if err != nil || !c.HasDomain("a") || !c.HasDomain("b") {
		t.Errorf("two documents in a file: %v", err)
	}
}

func TestReadPathSkipsOtherFiles(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		"a.yaml": "domain: a\n", "b.yml": "domain: b\n", ".a.yaml.swp": "junk", "notes.txt": "junk",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755)
	c, err := LoadPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := c.Domains(); d != 2 || !c.HasDomain("a") || !c.HasDomain("b") {
		t.Errorf("domains = %d, want a and b only", d)
	}
	if _, err := LoadPath(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing path loaded")
	}
}

func TestWildcardMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, value string
		want           bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "b", false},
		{"*", "", true}, {"*", "x", true},
		{"a*b", "ab", true}, {"a*b", "axxb", true}, {"a*b", "a", false}, {"ab*ba", "aba", false},
		{"*x*", "x", true}, {"*x*", "yyy", false},
		{"a*b*c", "abbc", true}, {"a*b*c", "acb", false}, {"a*b*c", "abc", true},
		{"a**b", "ab", true},
	} {
		if got := wildcardMatch(strings.Split(tc.pattern, "*"), tc.value); got != tc.want {
			t.Errorf("wildcardMatch(%q, %q) = %v, want %v", tc.pattern, tc.value, got, tc.want)
		}
	}
}

// ruleLimit is a rule's first limit, or none for an unlimited rule.
func ruleLimit(r *Rule) Limit {
	if len(r.Limits) == 0 {
		return Limit{}
	}
	return r.Limits[0]
}

// TestSeveralLimits reads a descriptor with rate_limit and rate_limits
// beside it, with multipliers: every limit in order, each its own window.
func TestSeveralLimits(t *testing.T) {
	c, err := Load(File{Name: "l.yaml", Data: []byte(`domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10, name: burst}
    rate_limits:
      - {unit: minute, unit_multiplier: 5, requests_per_unit: 100}
      - {unit: day, requests_per_unit: 1000, name: daily}
  - key: plan
    rate_limits:
      - {unit: month, unit_multiplier: 3, requests_per_unit: 9000}
`)})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := c.Match("api", entries("user", "u1"))
	if !ok {
		t.Fatal("user: no match")
	}
	want := []struct {
		limit uint32
		d     time.Duration
		name  string
	}{{10, time.Second, "burst"}, {100, 5 * time.Minute, ""}, {1000, 24 * time.Hour, "daily"}}
	if len(m.Rule.Limits) != len(want) || m.Rule.Name != "burst" {
		t.Fatalf("limits %+v (rule name %q), want %+v", m.Rule.Limits, m.Rule.Name, want)
	}
	for i, w := range want {
		if l := m.Rule.Limits[i]; l.RequestsPerUnit != w.limit || l.Duration() != w.d || l.Name != w.name {
			t.Errorf("limit %d = %+v (%s), want %+v", i, l, l.Duration(), w)
		}
	}
	m, ok = c.Match("api", entries("plan", "pro"))
	if !ok || len(m.Rule.Limits) != 1 || m.Rule.Limits[0].Duration() != 90*24*time.Hour || m.Rule.Name != "" {
		t.Fatalf("plan: %+v, %v; want one limit of 90 days", m.Rule, ok)
	}
}

// TestMetricKeys: a rule's first two levels label envoyproxy/ratelimit's
// Prometheus names (key1, key2); with detailed_metric, the request's values.
func TestMetricKeys(t *testing.T) {
	c, err := LoadPath("testdata/examples")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		domain  string
		entries []Entry
		want    [2]string
	}{
		{"messaging", entries("message_type", "marketing", "to_number", "2061111111"), [2]string{"message_type_marketing", "to_number"}},
		{"mongo_cps", entries("database", "users"), [2]string{"database_users", ""}},
		{"example8", entries("key1", "unspecified_value"), [2]string{"key1_unspecified_value", ""}},
		{"example4", entries("key", "value", "subkey", "subvalue"), [2]string{"key_value", "subkey"}},
	} {
		m, ok := c.Match(tc.domain, tc.entries)
		if !ok || m.MetricKeys != tc.want {
			t.Errorf("%s %v: keys %q (match %v), want %q", tc.domain, tc.entries, m.MetricKeys, ok, tc.want)
		}
	}
}

// TestPenaltyFields: penalty and penalty_max are durations on a
// descriptor with limits of its own, penalty_max at least penalty.
func TestPenaltyFields(t *testing.T) {
	c, err := Load(File{Name: "p.yaml", Data: []byte("domain: d\ndescriptors:\n  - {key: ip, penalty: 5m, penalty_max: 1h, rate_limit: {unit: minute, requests_per_unit: 5}}\n")})
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := c.Match("d", entries("ip", "1.2.3.4")); m.Rule.Penalty != 5*time.Minute || m.Rule.PenaltyMax != time.Hour {
		t.Fatalf("rule: %+v", m.Rule)
	}
	for yaml, want := range map[string]string{
		"{key: ip, penalty: soon, rate_limit: {unit: minute, requests_per_unit: 5}}":                       "d.ip: penalty: must be a duration from 1ms to 720h, such as 5m; got \"soon\"",
		"{key: ip, penalty: 721h, rate_limit: {unit: minute, requests_per_unit: 5}}":                       "d.ip: penalty: must be a duration from 1ms to 720h, such as 5m; got \"721h\"",
		"{key: ip, penalty_max: 1h, rate_limit: {unit: minute, requests_per_unit: 5}}":                     "d.ip: penalty_max: must not be given without penalty",
		"{key: ip, penalty: 1h, penalty_max: 1m, rate_limit: {unit: minute, requests_per_unit: 5}}":        "d.ip: penalty_max: must be at least penalty (1h0m0s), got 1m0s",
		"{key: ip, penalty: 1h, rate_limit: {unlimited: true}}":                                            "d.ip: penalty: must be given with a rate_limit or rate_limits of the descriptor's own",
		"{key: ip, penalty: 1h, rate_limit: {unit: minute, requests_per_unit: 5, algorithm: concurrency}}": "d.ip: penalty: must not be given with a concurrency limit",
	} {
		_, err := Load(File{Name: "p.yaml", Data: []byte("domain: d\ndescriptors:\n  - " + yaml + "\n")})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", yaml, err, want)
		}
	}
}
