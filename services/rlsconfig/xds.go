package rlsconfig

import (
	"fmt"
	"strconv"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// LoadXDS compiles the RateLimitConfig resources of one xDS response (the
// type envoyproxy/ratelimit's GRPC_XDS_SOTW source reads, which Envoy
// Gateway serves) into a configuration, by the rules files follow: each
// resource defines domains as a file does, and a domain may be defined
// once. Every error names the resource. The type has no rate_limits,
// unit_multiplier, value_to_metric or share_threshold: those are the
// files' alone.
func LoadXDS(configs ...*rlsconfv3.RateLimitConfig) (*Config, error) {
	sources := make([]source, len(configs))
	for i, rc := range configs {
		name := fmt.Sprintf("xds resource %q", rc.GetName())
		descriptors, err := xdsDescriptors(rc.GetDescriptors())
		if err != nil {
			return nil, fmt.Errorf("%s: domain %q: %w", name, rc.GetDomain(), err)
		}
		sources[i] = source{name: name, roots: []fileRoot{{Domain: rc.GetDomain(), Descriptors: descriptors}}}
	}
	return compileSources(sources)
}

// xdsDescriptors converts descriptors of the xDS type to those of a file.
func xdsDescriptors(in []*rlsconfv3.RateLimitDescriptor) ([]fileDescriptor, error) {
	out := make([]fileDescriptor, len(in))
	for i, d := range in {
		children, err := xdsDescriptors(d.GetDescriptors())
		if err != nil {
			return nil, err
		}
		out[i] = fileDescriptor{Key: d.GetKey(), Value: d.GetValue(), Descriptors: children, ShadowMode: d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(), QuotaMode: d.GetQuotaMode()}
		if md := d.GetMetadata(); md != nil {
			out[i].Metadata = md.AsMap()
		}
		if p := d.GetRateLimit(); p != nil {
			rl := &fileRateLimit{fileLimit: fileLimit{Name: p.GetName()}, Unlimited: p.GetUnlimited()}
			if p.GetUnit() != rlsconfv3.RateLimitUnit_UNKNOWN {
				rl.Unit = xdsUnit(p.GetUnit())
			}
			if n := p.GetRequestsPerUnit(); !p.GetUnlimited() || n != 0 {
				rl.RequestsPerUnit = &n
			}
			for _, r := range p.GetReplaces() {
				rl.Replaces = append(rl.Replaces, fileReplace{Name: r.GetName()})
			}
			out[i].RateLimit = rl
		}
	}
	return out, nil
}

// xdsUnit names a unit of the xDS type as a file spells it. The type's
// numbers are Envoy's (MONTH 5, YEAR 6, WEEK 7), as Unit's are; a number
// neither knows is written as a number, which the compiler refuses by
// name.
func xdsUnit(u rlsconfv3.RateLimitUnit) string {
	if name := Unit(u).String(); name != "UNKNOWN" {
		return strings.ToLower(name)
	}
	return strconv.Itoa(int(u))
}
