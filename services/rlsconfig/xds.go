package rlsconfig

import (
	"fmt"
	"math"
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
// files' alone. A limit's model, which the type has no field for, is read
// from its descriptor's metadata (see ModelMetadataKey).
func LoadXDS(configs ...*rlsconfv3.RateLimitConfig) (*Config, error) {
	return Compiler{}.LoadXDS(configs...)
}

// LoadXDS is [LoadXDS] by c: resources past its bounds are refused naming
// the bound, before anything of them is converted.
func (c Compiler) LoadXDS(configs ...*rlsconfv3.RateLimitConfig) (*Config, error) {
	if err := c.Bounds.checkXDS(configs); err != nil {
		return nil, err
	}
	sources := make([]source, len(configs))
	for i, rc := range configs {
		name := fmt.Sprintf("xds resource %q", rc.GetName())
		descriptors, err := xdsDescriptors(rc.GetDomain(), rc.GetDescriptors())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		sources[i] = source{name: name, roots: []fileRoot{{Domain: rc.GetDomain(), Descriptors: descriptors}}}
	}
	return c.compileSources(sources)
}

// xdsDescriptors converts descriptors of the xDS type, the children of
// path (named as the compiler names rules: domain.key_value…), to those of
// a file.
func xdsDescriptors(path string, in []*rlsconfv3.RateLimitDescriptor) ([]fileDescriptor, error) {
	out := make([]fileDescriptor, len(in))
	for i, d := range in {
		here := path + "." + descriptorName(d.GetKey(), d.GetValue())
		children, err := xdsDescriptors(here, d.GetDescriptors())
		if err != nil {
			return nil, err
		}
		out[i] = fileDescriptor{Key: d.GetKey(), Value: d.GetValue(), Descriptors: children, ShadowMode: d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(), QuotaMode: d.GetQuotaMode()}
		var model map[string]any
		if md := d.GetMetadata(); md != nil {
			out[i].Metadata = md.AsMap()
			if m, ok := out[i].Metadata[ModelMetadataKey]; ok {
				if model, ok = m.(map[string]any); !ok {
					return nil, fmt.Errorf("%s: metadata.%s: must be a struct", here, ModelMetadataKey)
				}
				delete(out[i].Metadata, ModelMetadataKey)
				if len(out[i].Metadata) == 0 {
					out[i].Metadata = nil
				}
				if d.GetRateLimit() == nil {
					return nil, fmt.Errorf("%s: metadata.%s: chooses the model of the descriptor's rate_limit, which it lacks", here, ModelMetadataKey)
				}
			}
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
			if model != nil {
				if err := xdsModel(model, rl); err != nil {
					return nil, fmt.Errorf("%s: metadata.%s.%w", here, ModelMetadataKey, err)
				}
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

// ModelMetadataKey is the key of a descriptor's metadata that chooses, over
// xDS, the model of the descriptor's rate_limit, as a file's algorithm,
// burst and calendar do (RateLimitPolicy has no fields for them):
//
//	metadata:
//	  unkey.ratelimit:
//	    algorithm: token_bucket   # sliding_window (default), fixed_window, concurrency
//	    burst: 100
//	    calendar:                 # or: calendar periods as the windows
//	      unit: month             # day, week, month, year; default the policy's unit
//	      time_zone: Europe/Berlin
//
// The key is read and removed: Envoy gets the rest of the metadata back.
const ModelMetadataKey = "unkey.ratelimit"

// xdsModel sets rl's model from the struct under ModelMetadataKey, whose
// keys are exactly algorithm, burst and calendar (unit, time_zone). An
// error names the key, after "metadata.unkey.ratelimit.".
func xdsModel(model map[string]any, rl *fileRateLimit) error {
	for key, v := range model {
		switch key {
		case "algorithm":
			a, ok := v.(string)
			if !ok {
				return fmt.Errorf("algorithm: must be a string: sliding_window, fixed_window, token_bucket or concurrency")
			}
			rl.Algorithm = a
		case "burst":
			n, ok := v.(float64)
			if !ok || n != math.Trunc(n) || n < 0 || n > math.MaxUint32 {
				return fmt.Errorf("burst: must be a whole number from 0 (requests_per_unit) to %d", uint32(math.MaxUint32))
			}
			b := uint32(n)
			rl.Burst = &b
		case "calendar":
			c, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("calendar: must be a struct of unit and time_zone")
			}
			cal := &fileCalendar{}
			for ck, cv := range c {
				str, ok := cv.(string)
				switch {
				case ck != "unit" && ck != "time_zone":
					return fmt.Errorf("calendar.%s: unknown field: a calendar has unit and time_zone", ck)
				case !ok:
					return fmt.Errorf("calendar.%s: must be a string", ck)
				case ck == "unit":
					cal.Unit = str
				default:
					cal.TimeZone = str
				}
			}
			// The calendar's periods take the unit's place; the policy's
			// unit names them when the calendar does not, and must not
			// name others.
			switch {
			case cal.Unit == "":
				cal.Unit = rl.Unit
			case rl.Unit != "" && !strings.EqualFold(cal.Unit, rl.Unit):
				return fmt.Errorf("calendar.unit: %q differs from the policy's unit %q; give one, or the same", cal.Unit, rl.Unit)
			}
			rl.Calendar, rl.Unit = cal, ""
		default:
			return fmt.Errorf("%s: unknown field: the model has algorithm, burst and calendar", key)
		}
	}
	return nil
}
