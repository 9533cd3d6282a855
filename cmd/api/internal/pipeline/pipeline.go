// Package pipeline is the use cases every protocol of the API shares, free
// of any protocol: Limit, Batch, Multi, Settle and the override reads and
// writes, each authorizing the call's principal, validating once,
// applying overrides, deciding, recording metrics, analytics and the audit
// log. The adapters (Connect and gRPC, Unkey's v2 routes, Envoy's rate
// limit service) only translate their formats to a Call and a Decision
// back; a new protocol is a new adapter, not a new copy of these steps.
//
// Authentication, the body cap and the decode budget are the transport's,
// in front of the adapters, since they come before any format is known;
// the sorting of failures is package failure's.
package pipeline

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/services/analytics"
	"github.com/unkeyed/ratelimit/services/audit"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/penalties"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/reservation"
	ledgermem "github.com/unkeyed/ratelimit/services/reservation/memstore"
	ledgerstore "github.com/unkeyed/ratelimit/services/reservation/store"
)

// Pipeline decides requests on a limiter and its overrides.
type Pipeline struct {
	limiter   *ratelimit.Service
	overrides *overrides.Registry
	audit     *audit.Writer // nil: changes are not recorded
	metrics   *metrics
	batches   *batchGate // nil: batches are not gated
	now       func() time.Time
	// keyring and ledger issue and settle reservations (see settle.go);
	// scope names where the ledger records settlements.
	keyring *reservation.Keyring
	ledger  ledgerstore.Ledger
	scope   string
	// ledgerTimeout bounds a wait on the ledger (see claim).
	ledgerTimeout time.Duration
	logger        *slog.Logger
	// analytics counts every decision by namespace and identifier; nil:
	// not counted.
	analytics *analytics.Recorder
	// penalties keeps the penalty boxes (see penalty.go); nil: calls that
	// ask for a penalty are refused.
	penalties *penalties.Box
}

// Option configures a Pipeline.
type Option func(*Pipeline)

// WithAudit records every change of an override with w.
func WithAudit(w *audit.Writer) Option { return func(p *Pipeline) { p.audit = w } }

// WithBatchEntriesInFlight bounds the batch entries one workspace may have
// being decided at once (see batchGate); 0 leaves batches ungated.
func WithBatchEntriesInFlight(n int64) Option {
	return func(p *Pipeline) {
		if n > 0 {
			p.batches = newBatchGate(n)
		}
	}
}

// WithReservations signs reservations with keyring and records their
// settlements in ledger, whose reach scope names: "" for one every region
// shares, else a region's or a process's name. A reservation settles only
// in processes whose ledger has its issuer's scope, so that a secret shared
// more widely than the ledger never lets it settle twice. Without it a
// pipeline signs with a secret of its own and records in its memory: a
// reservation settles in the process that issued it only.
func WithReservations(keyring *reservation.Keyring, ledger ledgerstore.Ledger, scope string) Option {
	return func(p *Pipeline) { p.keyring, p.ledger, p.scope = keyring, ledger, scope }
}

// WithLedgerTimeout bounds how long a release, an extension or a settle
// waits on the ledger: store.RequestTimeout (300 ms) by default, what a
// decision waits on the regional store at most. A ledger that does not
// answer in time counts as one that failed.
func WithLedgerTimeout(d time.Duration) Option { return func(p *Pipeline) { p.ledgerTimeout = d } }

// WithAnalytics counts every decision in r (see package analytics).
func WithAnalytics(r *analytics.Recorder) Option { return func(p *Pipeline) { p.analytics = r } }

// WithLogger logs what the pipeline cannot tell its caller (a ledger that
// failed) with l.
func WithLogger(l *slog.Logger) Option { return func(p *Pipeline) { p.logger = l } }

// claimInLedger records in the ledger, once, that reservation or lease id
// of workspace is used up at cost (see ledgerstore.Ledger.Claim), waiting
// at most ledgerTimeout: the ledger is a store like the others, and a
// request never waits on a store longer than a decision does. A claim that
// times out after the ledger recorded it errs strict: this call frees or
// gives back nothing, and a retry finds the claim made.
func (p *Pipeline) claimInLedger(ctx context.Context, id [16]byte, workspace string, cost int64, expires time.Time) (bool, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, p.ledgerTimeout)
	defer cancel()
	return p.ledger.Claim(ctx, id, workspace, cost, expires)
}

// New returns a pipeline on limiter and ov, registering its metrics with
// reg.
func New(limiter *ratelimit.Service, ov *overrides.Registry, reg prometheus.Registerer, opts ...Option) (*Pipeline, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{limiter: limiter, overrides: ov, metrics: m, now: time.Now,
		logger: slog.New(slog.DiscardHandler), ledgerTimeout: store.RequestTimeout}
	for _, o := range opts {
		o(p)
	}
	if p.keyring == nil {
		p.keyring = reservation.NewKeyring(nil, p.logger)
		p.ledger = ledgermem.New(ledgermem.DefaultRecords, p.now)
		p.scope = "process:" + reservation.NewProcessID()
	}
	return p, nil
}
