package rlsconfig

import (
	"fmt"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// Compiler compiles rules: files (Load) and xDS resources (LoadXDS).
type Compiler struct {
	// Bounds bound what a configuration may hold; a bound left zero is
	// DefaultBounds'.
	Bounds Bounds
	// CalendarZone, when not nil, turns on calendar units: a rule's unit
	// of day, week, month or year, without a calendar of its own, is that
	// calendar period in this IANA zone ("" or "UTC": UTC) rather than
	// its length (a month of 30 days), unless the rule is a token bucket
	// (a rate) or a concurrency limit (a lease). Envoy Gateway's and AI
	// Gateway's policies say a unit and no more: this is how their
	// monthly budget resets on the first of the month. A multiplier
	// other than 1 is refused with such a unit: a window is one period.
	CalendarZone *string
}

// Bounds bound what one configuration may hold, so that the source of the
// rules (a management server every replica listens to, and hears again
// after each restart) cannot make a replica spend memory past them: a
// configuration past a bound is refused naming it, before it is compiled,
// and the last good one stays in force. Within them a compile costs
// memory in proportion to what it compiles.
type Bounds struct {
	// MaxDepth bounds how deeply descriptors nest. A request's descriptor
	// holds at most 32 entries, one a level, so a deeper rule matches
	// nothing; a rule's path is written out at each level, so depth
	// multiplies what a compile keeps.
	MaxDepth int
	// MaxDescriptors bounds the descriptors of every domain together,
	// those with a limit and those that only lead to one.
	MaxDescriptors int
	// MaxBytes bounds what the compiled rules take in memory, as
	// estimated from each descriptor's path and metadata (see
	// compiledBytes).
	MaxBytes int64
}

// DefaultBounds fit the largest configurations Envoy Gateway and AI
// Gateway write (a descriptor a rule of a route, nested as deep as its
// client selectors: under ten levels, some thousands of rules) many times
// over.
var DefaultBounds = Bounds{MaxDepth: 32, MaxDescriptors: 100_000, MaxBytes: 64 << 20}

// descriptorBytes is what a compiled descriptor takes beside its path: its
// node, its entry in its parent's map, its rule and limits, its metric
// keys.
const descriptorBytes = 512

// compiledBytes estimates what a descriptor whose path (domain.key_value…)
// is pathBytes long and whose metadata is metadataBytes takes once
// compiled: its path twice (the rule's and the conversion's), its
// metadata twice (decoded, and as Envoy gets it back), and
// descriptorBytes.
func compiledBytes(pathBytes, metadataBytes int) int64 {
	return 2*int64(pathBytes) + 2*int64(metadataBytes) + descriptorBytes
}

// orDefault returns b with each bound left zero set to DefaultBounds'.
func (b Bounds) orDefault() Bounds {
	if b.MaxDepth == 0 {
		b.MaxDepth = DefaultBounds.MaxDepth
	}
	if b.MaxDescriptors == 0 {
		b.MaxDescriptors = DefaultBounds.MaxDescriptors
	}
	if b.MaxBytes == 0 {
		b.MaxBytes = DefaultBounds.MaxBytes
	}
	return b
}

// tally counts a configuration's descriptors against b as they are
// walked, and names the first bound passed.
type tally struct {
	b           Bounds
	descriptors int
	bytes       int64
}

// add counts one descriptor at depth (1 for a domain's own), whose path is
// pathBytes long and metadata metadataBytes, and returns the bound it
// passes, if any, for the caller to place.
func (t *tally) add(depth, pathBytes, metadataBytes int) error {
	t.descriptors++
	t.bytes += compiledBytes(pathBytes, metadataBytes)
	switch {
	case depth > t.b.MaxDepth:
		return fmt.Errorf("descriptors nest more than %d deep, the bound of nesting (UNKEY_RLS_MAX_DEPTH): a request's descriptor matches at most 32 levels", t.b.MaxDepth)
	case t.descriptors > t.b.MaxDescriptors:
		return fmt.Errorf("more than %d descriptors, the bound of descriptors (UNKEY_RLS_MAX_DESCRIPTORS)", t.b.MaxDescriptors)
	case t.bytes > t.b.MaxBytes:
		return fmt.Errorf("the compiled rules would take more than %d bytes, the bound of their memory (UNKEY_RLS_MAX_RULES_BYTES)", t.b.MaxBytes)
	}
	return nil
}

// checkXDS walks the descriptors of configs, as they arrived, against b:
// no deeper than one level past MaxDepth, one domain's descriptor at a
// time, and no string built, so that what the walk costs is bounded
// whatever the response.
func (b Bounds) checkXDS(configs []*rlsconfv3.RateLimitConfig) error {
	t := tally{b: b.orDefault()}
	type frame struct {
		d         *rlsconfv3.RateLimitDescriptor
		depth     int
		pathBytes int
	}
	var stack []frame
	for _, rc := range configs {
		for _, top := range rc.GetDescriptors() {
			stack = append(stack[:0], frame{top, 1, len(rc.GetDomain())})
			for len(stack) > 0 {
				f := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				path := f.pathBytes + 1 + len(f.d.GetKey()) + 1 + len(f.d.GetValue())
				md := 0
				if m := f.d.GetMetadata(); m != nil {
					md = proto.Size(m)
				}
				if err := t.add(f.depth, path, md); err != nil {
					return fmt.Errorf("xds resource %q: domain %q: %w", rc.GetName(), rc.GetDomain(), err)
				}
				for _, c := range f.d.GetDescriptors() {
					stack = append(stack, frame{c, f.depth + 1, path})
				}
			}
		}
	}
	return nil
}

// checkFiles walks the descriptors of the files' domains against b, as
// checkXDS does, their metadata not counted (a file holds at most 1 MiB,
// all of them 4 MiB: see ReadPath).
func (b Bounds) checkFiles(sources []source) error {
	t := tally{b: b.orDefault()}
	var walk func(src, domain string, ds []fileDescriptor, depth, pathBytes int) error
	walk = func(src, domain string, ds []fileDescriptor, depth, pathBytes int) error {
		for i := range ds {
			d := &ds[i]
			path := pathBytes + 1 + len(d.Key) + 1 + len(d.Value)
			if err := t.add(depth, path, 0); err != nil {
				return fmt.Errorf("%s: domain %q: %w", src, domain, err)
			}
			if err := walk(src, domain, d.Descriptors, depth+1, path); err != nil {
				return err
			}
		}
		return nil
	}
	for _, s := range sources {
		for _, r := range s.roots {
			if err := walk(s.name, r.Domain, r.Descriptors, 1, len(r.Domain)); err != nil {
				return err
			}
		}
	}
	return nil
}
