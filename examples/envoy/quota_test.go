package envoy_test

import (
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// TestQuotaExample: quota.yaml decodes, as Envoy decodes a YAML bootstrap,
// into go-control-plane's Bootstrap, and its rate_limit_quota filter into
// RateLimitQuotaFilterConfig, each bucket's settings into
// RateLimitQuotaBucketSettings, all passing Envoy's validation; the filter
// reports to the cluster of the port README.md starts the service's gRPC
// on, over HTTP/2, in a domain rules/ holds, every 5 s (what the service
// assumes); and the buckets it builds (a user's, from X-User-Id; the
// anonymous one) match rules of that domain, as the service matches a
// bucket_id: its entries in key order as a descriptor's.
func TestQuotaExample(t *testing.T) {
	bs := bootstrap(t, "quota.yaml")
	var hcm hcmv3.HttpConnectionManager
	unpack(t, "the HTTP connection manager", bs.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig(), &hcm)
	filters := hcm.GetHttpFilters()
	if len(filters) != 2 || filters[0].GetName() != "envoy.filters.http.rate_limit_quota" {
		t.Fatalf("quota.yaml: HTTP filters %v, want the quota filter and the router", filters)
	}
	var quota rlqsv3.RateLimitQuotaFilterConfig
	unpack(t, "the quota filter", filters[0].GetTypedConfig(), &quota)
	unpack(t, "the router", filters[1].GetTypedConfig(), &routerv3.Router{})

	cluster := quota.GetRlqsServer().GetEnvoyGrpc().GetClusterName()
	var port uint32
	for _, c := range bs.GetStaticResources().GetClusters() {
		if c.GetName() != cluster {
			continue
		}
		port = c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
		var opts httpv3.HttpProtocolOptions
		unpack(t, "the quota cluster's protocol options",
			c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"], &opts)
		if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
			t.Error("the quota cluster does not speak HTTP/2, which gRPC needs")
		}
	}
	if port != 8081 {
		t.Errorf("the quota filter reports to a cluster on port %d; README.md starts the service's gRPC on 8081", port)
	}

	rules, err := rlsconfig.LoadPath("rules")
	if err != nil {
		t.Fatalf("rules/: %v", err)
	}
	if !rules.HasDomain(quota.GetDomain()) {
		t.Fatalf("rules/ has no domain %q, the one the quota filter reports", quota.GetDomain())
	}
	// The buckets the matchers build, for a request with X-User-Id: alice
	// and for one without.
	list := quota.GetBucketMatchers().GetMatcherList().GetMatchers()
	if len(list) != 1 {
		t.Fatalf("bucket_matchers: %d matchers, want the one of X-User-Id", len(list))
	}
	var header matcherv3.HttpRequestHeaderMatchInput
	unpack(t, "the matcher's input", list[0].GetPredicate().GetSinglePredicate().GetInput().GetTypedConfig(), &header)
	for _, tc := range []struct {
		name     string
		settings *rlqsv3.RateLimitQuotaBucketSettings
		limit    uint32
	}{
		{"a user's bucket", new(rlqsv3.RateLimitQuotaBucketSettings), 1000},
		{"the anonymous bucket", new(rlqsv3.RateLimitQuotaBucketSettings), 100},
	} {
		action := list[0].GetOnMatch().GetAction()
		if tc.limit == 100 {
			action = quota.GetBucketMatchers().GetOnNoMatch().GetAction()
		}
		unpack(t, tc.name, action.GetTypedConfig(), tc.settings)
		if got := tc.settings.GetReportingInterval().AsDuration(); got != 5*time.Second {
			t.Errorf("%s reports every %v: Envoy reports every 5 s whatever it says, and the service assumes it", tc.name, got)
		}
		if tc.settings.GetDenyResponseSettings().GetHttpStatus().GetCode() != 429 {
			t.Errorf("%s: a denied request is not answered 429", tc.name)
		}
		id := map[string]string{}
		for k, v := range tc.settings.GetBucketIdBuilder().GetBucketIdBuilder() {
			id[k] = v.GetStringValue()
			if custom := v.GetCustomValue(); custom != nil {
				var in matcherv3.HttpRequestHeaderMatchInput
				unpack(t, tc.name+"'s "+k, custom.GetTypedConfig(), &in)
				if in.GetHeaderName() != header.GetHeaderName() {
					t.Errorf("%s takes %s from %q, not the header its matcher checks", tc.name, k, in.GetHeaderName())
				}
				id[k] = "alice" // the header's value
			}
		}
		entries := []rlsconfig.Entry{{Key: "user", Value: id["user"]}}
		if len(id) != 1 {
			t.Fatalf("%s: bucket id %v, want one entry, user", tc.name, id)
		}
		m, ok := rules.Match(quota.GetDomain(), entries)
		if !ok || len(m.Rule.Limits) != 1 || m.Rule.Limits[0].RequestsPerUnit != tc.limit {
			t.Errorf("%s %v: matched %v, want a rule of %d a minute", tc.name, id, m.Rule, tc.limit)
		}
	}
}
