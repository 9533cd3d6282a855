package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// The use case every protocol's Limit reaches: the call counts in the
// workspace of the key that made it (the principal the transport put in
// the context), the override that matches it replaces its limit, and a key
// refused a namespace is told which permission it lacks.
func ExamplePipeline_Limit() {
	reg := prometheus.NewRegistry()
	limiter, err := ratelimit.New("eu-west", ratelimit.WithRegisterer(reg))
	if err != nil {
		panic(err)
	}
	ov, err := overrides.New(overrides.WithRegisterer(reg))
	if err != nil {
		panic(err)
	}
	p, err := pipeline.New(limiter, ov, reg)
	if err != nil {
		panic(err)
	}
	perms, err := access.Parse([]string{"ratelimit.api.limit"})
	if err != nil {
		panic(err)
	}
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "acme", Permissions: perms, KeyID: "key_1"})
	admin := call.WithPrincipal(context.Background(), access.Principal{Workspace: "acme", Permissions: access.All()})
	if _, err := p.SetOverride(admin, overrides.Override{Namespace: "api", Identifier: "vip", Limit: 1000, Duration: time.Minute}); err != nil {
		panic(err)
	}
	for _, id := range []string{"guest", "vip"} {
		d, err := p.Limit(ctx, pipeline.Call{Request: ratelimit.Request{Namespace: "api", Identifier: id, Limit: 10,
			Duration: time.Minute, Cost: 1}})
		if err != nil {
			panic(err)
		}
		fmt.Println(id, d.Success, d.Remaining, "of", d.Limit, "override:", d.OverrideID != "")
	}
	_, err = p.Limit(ctx, pipeline.Call{Request: ratelimit.Request{Namespace: "billing", Identifier: "guest", Limit: 10,
		Duration: time.Minute, Cost: 1}})
	fmt.Println(err)
	// Output:
	// guest true 9 of 10 override: false
	// vip true 999 of 1000 override: true
	// permission denied: this key lacks ratelimit.billing.limit
}
