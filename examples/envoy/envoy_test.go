// Package envoy_test holds the check of this example: Envoy's bootstrap
// as Envoy reads it, and the rules as the service reads them.
package envoy_test

import (
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/unkeyed/ratelimit/internal/testkit/rlscall"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// validator is a message of go-control-plane, with the checks Envoy's
// protoc-gen-validate rules make (the ones Envoy runs on a bootstrap).
type validator interface {
	proto.Message
	ValidateAll() error
}

// unpack decodes a typed_config into m and validates it.
func unpack(t *testing.T, where string, a *anypb.Any, m validator) {
	t.Helper()
	if err := a.UnmarshalTo(m); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if err := m.ValidateAll(); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

// bootstrap reads file as Envoy decodes a YAML bootstrap, into
// go-control-plane's Bootstrap, and runs Envoy's validation on it.
func bootstrap(t *testing.T, file string) *bootstrapv3.Bootstrap {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := rlscall.DecodeYAML(raw, &bs); err != nil {
		t.Fatalf("%s is no Envoy bootstrap: %v", file, err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return &bs
}

// TestEnvoyExample: envoy.yaml decodes, as Envoy decodes a YAML bootstrap,
// into go-control-plane's Bootstrap with every typed_config one of Envoy's
// messages, and each passes Envoy's validation; its rate limit filter asks
// the domain rules/ holds, on the cluster of the port README.md starts
// the service on, over HTTP/2; and the descriptor its route sends
// (remote_address) matches a rule of that domain.
func TestEnvoyExample(t *testing.T) {
	bs := bootstrap(t, "envoy.yaml")

	var hcm hcmv3.HttpConnectionManager
	listeners := bs.GetStaticResources().GetListeners()
	if len(listeners) != 1 || len(listeners[0].GetFilterChains()) != 1 || len(listeners[0].GetFilterChains()[0].GetFilters()) != 1 {
		t.Fatalf("envoy.yaml: want one listener with one filter chain of one filter, the HTTP connection manager")
	}
	unpack(t, "the HTTP connection manager", listeners[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig(), &hcm)
	var rl ratelimitv3.RateLimit
	var router routerv3.Router
	filters := hcm.GetHttpFilters()
	if len(filters) != 2 {
		t.Fatalf("envoy.yaml: %d HTTP filters, want the rate limit filter and the router", len(filters))
	}
	unpack(t, "the rate limit filter", filters[0].GetTypedConfig(), &rl)
	unpack(t, "the router", filters[1].GetTypedConfig(), &router)

	clusters := map[string]uint32{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		port := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
		clusters[c.GetName()] = port
		if c.GetName() == rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() {
			var opts httpv3.HttpProtocolOptions
			unpack(t, "the rate limit cluster's protocol options",
				c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"], &opts)
			if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
				t.Error("the rate limit cluster does not speak HTTP/2, which gRPC needs")
			}
		}
	}
	if port := clusters[rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()]; port != 8081 {
		t.Errorf("the rate limit filter calls a cluster on port %d; README.md starts the service's gRPC on 8081", port)
	}

	rules, err := rlsconfig.LoadPath("rules")
	if err != nil {
		t.Fatalf("rules/: %v", err)
	}
	if !rules.HasDomain(rl.GetDomain()) {
		t.Fatalf("rules/ has no domain %q, the one the rate limit filter asks", rl.GetDomain())
	}
	route := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
	if len(route.GetRateLimits()) != 1 || len(route.GetRateLimits()[0].GetActions()) != 1 || route.GetRateLimits()[0].GetActions()[0].GetRemoteAddress() == nil {
		t.Fatalf("the route's rate_limits: %v, want one remote_address action", route.GetRateLimits())
	}
	// Envoy's remote_address action sends the entry ("remote_address",
	// the client's address).
	if _, ok := rules.Match(rl.GetDomain(), []rlsconfig.Entry{{Key: "remote_address", Value: "10.0.0.1"}}); !ok {
		t.Errorf("no rule of %q matches the descriptor the route sends", rl.GetDomain())
	}
}
