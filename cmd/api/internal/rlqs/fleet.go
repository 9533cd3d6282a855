package rlqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/peer"

	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// Fleet is where the service counts what every Envoy of a bucket asks,
// across the processes and regions that serve them, as the limits are
// shared: pipeline.Pipeline is one.
type Fleet interface {
	// Tally adds n to the counter identifier of namespace, in the call's
	// workspace, and returns what it holds over the last window, every
	// process's additions as far as the stores have carried them.
	Tally(ctx context.Context, namespace, identifier string, n int64, window time.Duration) (int64, error)
	// RecordDenied counts in the analytics n requests of identifier that
	// an Envoy denied itself.
	RecordDenied(ctx context.Context, namespace, identifier string, n uint64)
}

// FleetWindow is the window of the fleet's tallies: three reports, so
// that each Envoy's demand is in it three times over, and one that stops
// leaves it within 15 s.
const FleetWindow = 3 * ReportInterval

// idleShare is the least share of an Envoy's weight: a tenth of the
// fleet's mean demand, so that one that was idle can start. The floors of
// idle Envoys add at most a tenth of the rate to what is assigned.
const idleShare = 0.1

// share returns b's share (0 to 1) of its bucket's budget, its Envoy
// having reported u at now: its demand over the fleet's. Each report adds
// its requests (allowed and denied) to the bucket's demand tally and its
// seconds to its presence tally, both over FleetWindow; the fleet's
// demand a second is the first over the span the tallies cover, how many
// Envoys report is the second over it. An Envoy whose demand is not known
// yet (its first report) is given the mean; an idle one at least a tenth
// of the mean. Where the tallies fail, the share is an equal one among the
// Envoys this process serves.
func (s *Service) share(ctx context.Context, st *stream, b *bucket, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, now time.Time) float64 {
	secs := max(u.GetTimeElapsed().GetSeconds(), 0)
	asked := int64(u.GetNumRequestsAllowed() + u.GetNumRequestsDenied())
	if secs == 0 {
		asked = 0 // the first report: counted once its time is known
	}
	ns := namespaceOf(st.domain)
	demand, err := s.fleet.Tally(ctx, ns, b.demandTally, asked, FleetWindow)
	var present int64
	if err == nil {
		present, err = s.fleet.Tally(ctx, ns, b.presentTally, secs, FleetWindow)
	}
	if err != nil {
		s.logger.Warn("a quota bucket's fleet tallies could not be read: an equal share among this process's Envoys",
			"domain", st.domain, "error", err)
		return 1 / float64(s.subs.count(b.key))
	}
	span := min(max(now.Sub(s.subs.since(b.key)), ReportInterval), FleetWindow).Seconds()
	fleet, envoys := float64(demand)/span, max(float64(present)/span, 1)
	mean := fleet / envoys
	if u.GetTimeElapsed().GetSeconds() <= 0 {
		if fleet == 0 {
			return 1 / (envoys + 1)
		}
		return mean / (fleet + mean)
	}
	if fleet == 0 {
		return 1 / envoys
	}
	w := max(float64(asked)/float64(secs), idleShare*mean)
	return min(w/max(fleet, w), 1)
}

// tallyName names one of a bucket's fleet tallies: what of (demand,
// present) and a digest of its key, which may be long and hold any byte.
func tallyName(what, key string) string {
	sum := sha256.Sum256([]byte(key))
	return "rlqs:" + what + ":" + hex.EncodeToString(sum[:12])
}

// namespaceOf is the namespace of domain's counters, the rate limit
// service's.
func namespaceOf(domain string) string { return rlsconfig.NamespacePrefix + domain }

// keyOf names a bucket id, whose keys in order are keys: equal maps name
// one bucket.
func keyOf(id map[string]string, keys []string) string {
	var b []byte
	for _, k := range keys {
		b = append(b, k...)
		b = append(b, 0)
		b = append(b, id[k]...)
		b = append(b, 0)
	}
	return string(b)
}

// peerOf names the connection of a grpc-go stream: its peer's address.
func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// subscribers holds, for each bucket key, the streams of this process that
// report it: where a denial is pushed, and since when the process has
// served the bucket (the span its tallies cover, as far as it knows).
type subscribers struct {
	mu    sync.Mutex
	byKey map[string]*subscription
}

type subscription struct {
	since   time.Time
	streams map[*stream]struct{}
}

// join subscribes st to key at now.
func (s *subscribers) join(key string, st *stream, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.byKey[key]
	if !ok {
		sub = &subscription{since: now, streams: map[*stream]struct{}{}}
		s.byKey[key] = sub
	}
	sub.streams[st] = struct{}{}
}

// leave unsubscribes st from key.
func (s *subscribers) leave(key string, st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub := s.byKey[key]; sub != nil {
		delete(sub.streams, st)
		if len(sub.streams) == 0 {
			delete(s.byKey, key)
		}
	}
}

// others returns the streams subscribed to key but st.
func (s *subscribers) others(key string, st *stream) []*stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*stream
	if sub := s.byKey[key]; sub != nil {
		for o := range sub.streams {
			if o != st {
				out = append(out, o)
			}
		}
	}
	return out
}

// count returns how many streams are subscribed to key, at least one.
func (s *subscribers) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub := s.byKey[key]; sub != nil {
		return max(len(sub.streams), 1)
	}
	return 1
}

// since returns when the process began to serve key.
func (s *subscribers) since(key string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub := s.byKey[key]; sub != nil {
		return sub.since
	}
	return time.Time{}
}
