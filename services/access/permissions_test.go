package access_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/services/access"
)

func TestAllows(t *testing.T) {
	p, err := access.Parse([]string{
		"ratelimit.api.requests.limit",
		"ratelimit.envoy:edge.limit",
		"ratelimit.*.read_override",
		"ratelimit.api.requests.set_override",
		"audit.read",
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		action access.Action
		ns     string
		want   bool
	}{
		{access.Limit, "api.requests", true},
		{access.Limit, "envoy:edge", true},
		{access.Limit, "api", false},            // a prefix of a namespace is another namespace
		{access.Limit, "api.requests.x", false}, // and so is an extension
		{access.Limit, "*", false},              // "*" in a request is a name, not a wildcard
		{access.ReadOverride, "anything", true},
		{access.SetOverride, "api.requests", true},
		{access.SetOverride, "other", false},
		{access.DeleteOverride, "api.requests", false},
		{access.ReadAnalytics, "api.requests", false},
	}
	for _, c := range cases {
		if got := p.Allows(c.action, c.ns); got != c.want {
			t.Errorf("Allows(%v, %q) = %v, want %v", c.action, c.ns, got, c.want)
		}
	}
	if !p.Has(access.ReadAudit) || p.Has(access.ManageKeys) || p.Has("ratelimit.*.limit") {
		t.Errorf("Has: audit %v, keys %v, namespaced %v; want true, false, false",
			p.Has(access.ReadAudit), p.Has(access.ManageKeys), p.Has("ratelimit.*.limit"))
	}
}

func TestZeroAndAll(t *testing.T) {
	var none access.Permissions
	all := access.All()
	for _, a := range []access.Action{access.Limit, access.ReadOverride, access.SetOverride, access.DeleteOverride, access.ReadAnalytics} {
		if none.Allows(a, "ns") {
			t.Errorf("zero Permissions allows %v", a)
		}
		if !all.Allows(a, "ns") {
			t.Errorf("All() refuses %v", a)
		}
	}
	if none.Has(access.ManageKeys) || none.Has(access.ReadStatus) || !all.Has(access.ManageKeys) || !all.Has(access.ReadAudit) ||
		!all.Has(access.ReadStatus) {
		t.Error("permissions of no namespace: zero must hold none, All() every one")
	}
	if got := len(all.Names()); got != 8 {
		t.Errorf("All().Names() has %d entries, want 8: %v", got, all.Names())
	}
	if status, _ := access.Parse([]string{"status.read"}); !status.Has(access.ReadStatus) || status.Has(access.ReadAudit) ||
		status.AllowsSome(access.ReadAnalytics) {
		t.Error("status.read alone: must hold it and nothing else")
	}
	if one, _ := access.Parse([]string{"ratelimit.x.read_analytics"}); !one.AllowsSome(access.ReadAnalytics) || one.AllowsSome(access.Limit) {
		t.Error("AllowsSome: read_analytics of one namespace allows it in some, and nothing else")
	}
}

func TestParseRejects(t *testing.T) {
	cases := map[string]string{
		"":                       "must be",
		"keys.read":              "must be",
		"ratelimit.limit":        "or ratelimit.<namespace>.<action>",
		"ratelimit..limit":       "namespace must be",
		"ratelimit.ns.spend":     "action must be one of",
		"ratelimit.ns.":          "action must be one of",
		"ratelimit.a\x00b.limit": "namespace must be",
		"ratelimit." + strings.Repeat("n", 256) + ".limit": "namespace must be",
		"ratelimit.\xff.limit":                             "namespace must be",
	}
	for name, want := range cases {
		_, err := access.Parse([]string{"ratelimit.*.limit", name})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "permissions[1]") {
			t.Errorf("Parse(%q) = %v, want an error about permissions[1] containing %q", name, err, want)
		}
	}
	if _, err := access.Parse(make([]string, access.MaxPermissions+1)); err == nil {
		t.Errorf("Parse of %d permissions succeeded", access.MaxPermissions+1)
	}
}

func TestNamesRoundTrip(t *testing.T) {
	in := []string{"ratelimit.b.limit", "keys.manage", "ratelimit.*.set_override", "ratelimit.a.delete_override",
		"ratelimit.a.set_override", "ratelimit.a.delete_override"}
	p, err := access.Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	// A namespace's action that "*" already allows is not listed again.
	want := []string{"keys.manage", "ratelimit.*.set_override", "ratelimit.a.delete_override", "ratelimit.b.limit"}
	if got := p.Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	again, err := access.Parse(p.Names())
	if err != nil || !slices.Equal(again.Names(), want) {
		t.Fatalf("Parse(Names()) = %v, %v; want the same set", again.Names(), err)
	}
}

func TestAllowsDoesNotAllocate(t *testing.T) {
	p, _ := access.Parse([]string{"ratelimit.api.limit"})
	if n := testing.AllocsPerRun(100, func() { p.Allows(access.Limit, "api") }); n != 0 {
		t.Errorf("Allows allocates %v times per call", n)
	}
}

func ExampleParse() {
	p, err := access.Parse([]string{"ratelimit.*.limit", "ratelimit.api.requests.set_override"})
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Allows(access.Limit, "envoy:edge"))
	fmt.Println(p.Allows(access.SetOverride, "api.requests"))
	if !p.Allows(access.DeleteOverride, "api.requests") {
		fmt.Println("lacks", access.Name(access.DeleteOverride, "api.requests"))
	}
	// Output:
	// true
	// true
	// lacks ratelimit.api.requests.delete_override
}
