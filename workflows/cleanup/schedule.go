package cleanup

import (
	"time"

	restate "github.com/restatedev/sdk-go"
)

// StartRequest starts a schedule.
type StartRequest struct {
	// IntervalSeconds between runs; 0 keeps the schedule's interval (or the
	// default of 300 for a new schedule). Changing it on a running schedule
	// replaces the pending run with one that starts at once.
	IntervalSeconds int64 `json:"intervalSeconds,omitempty"`
}

// RunRequest is the input of a run. Runs carry the token of the chain that
// sent them, so a run of a chain that was stopped does nothing.
type RunRequest struct {
	Chain string `json:"chain"`
}

// Status is what a schedule reports.
type Status struct {
	Scheduled       bool      `json:"scheduled"`
	IntervalSeconds int64     `json:"intervalSeconds"`
	Runs            int64     `json:"runs"`
	LastRun         time.Time `json:"lastRun,omitzero"`
	LastRunDeleted  int64     `json:"lastRunDeleted"`
	LastRunBatches  int       `json:"lastRunBatches"`
	TotalDeleted    int64     `json:"totalDeleted"`
	// LastRunPurged and TotalPurged count the override tombstones purged.
	LastRunPurged int64 `json:"lastRunPurged"`
	TotalPurged   int64 `json:"totalPurged"`
	// LastRunAuditPurged and TotalAuditPurged count the audit log entries
	// purged.
	LastRunAuditPurged int64 `json:"lastRunAuditPurged"`
	TotalAuditPurged   int64 `json:"totalAuditPurged"`
	// LastRunSettlementsPurged and TotalSettlementsPurged count the
	// records of settled reservations purged once those could no longer
	// be settled.
	LastRunSettlementsPurged int64 `json:"lastRunSettlementsPurged"`
	TotalSettlementsPurged   int64 `json:"totalSettlementsPurged"`
	// LastRunAnalyticsPurged and TotalAnalyticsPurged count the analytics
	// rows (buckets and named identifiers) purged past their retention.
	LastRunAnalyticsPurged int64 `json:"lastRunAnalyticsPurged"`
	TotalAnalyticsPurged   int64 `json:"totalAnalyticsPurged"`
	// LastRunPenaltiesPurged and TotalPenaltiesPurged count the penalty
	// boxes purged once their block could no longer double the next.
	LastRunPenaltiesPurged int64     `json:"lastRunPenaltiesPurged"`
	TotalPenaltiesPurged   int64     `json:"totalPenaltiesPurged"`
	NextRun                time.Time `json:"nextRun,omitzero"`
	// Running reports, when Status answers, whether a scheduled chain is
	// alive: its next run is not overdue by more than twice the interval
	// and ten seconds. A chain that is not running is waiting on a worker
	// or a database that is down (its run is retried until they are back),
	// or stopped.
	Running bool `json:"running"`
	// OverdueSeconds is how long the next run is past its time, 0 if it
	// is not.
	OverdueSeconds int64 `json:"overdueSeconds"`
}

const (
	stateStatus  = "status"
	stateChain   = "chain"
	statePending = "pending" // invocation id of the scheduled run
)

// Start starts the schedule unless it is running already; then it only
// updates the interval if one is given. The first run starts at once.
func (c *Cleanup) Start(ctx restate.ObjectContext, req StartRequest) (Status, error) {
	st, err := restate.Get[Status](ctx, stateStatus)
	if err != nil {
		return Status{}, err
	}
	changed := false
	if req.IntervalSeconds != 0 {
		// Compare in seconds before converting: a large count of seconds
		// would overflow time.Duration and wrap into the allowed range.
		if req.IntervalSeconds < int64(minInterval/time.Second) || req.IntervalSeconds > int64(maxInterval/time.Second) {
			return Status{}, restate.TerminalErrorf("intervalSeconds: must be between %d and %d", int64(minInterval/time.Second), int64(maxInterval/time.Second))
		}
		changed = st.IntervalSeconds != 0 && st.IntervalSeconds != req.IntervalSeconds
		st.IntervalSeconds = req.IntervalSeconds
	}
	if st.IntervalSeconds == 0 {
		st.IntervalSeconds = int64(DefaultInterval / time.Second)
	}
	chain, err := restate.Get[string](ctx, stateChain)
	if err != nil {
		return Status{}, err
	}
	if chain != "" && changed {
		// Replace the pending run, which waits out the old interval, by one
		// that runs now: still one chain, one pending run.
		if err := cancelPending(ctx); err != nil {
			return Status{}, err
		}
		now, nowErr := nowMs(ctx)
		if nowErr != nil {
			return Status{}, nowErr
		}
		st.NextRun = time.UnixMilli(now).UTC()
		schedule(ctx, chain, 0)
	}
	if chain == "" {
		chain = restate.UUID(ctx).String()
		restate.Set(ctx, stateChain, chain)
		now, nowErr := nowMs(ctx)
		if nowErr != nil {
			return Status{}, nowErr
		}
		st.Scheduled = true
		st.NextRun = time.UnixMilli(now).UTC()
		schedule(ctx, chain, 0)
	}
	restate.Set(ctx, stateStatus, st)
	return st, nil
}

// Stop ends the schedule: its pending run finds the chain gone and does
// nothing. Start begins a new chain.
func (c *Cleanup) Stop(ctx restate.ObjectContext) (Status, error) {
	st, err := restate.Get[Status](ctx, stateStatus)
	if err != nil {
		return Status{}, err
	}
	if err := cancelPending(ctx); err != nil {
		return Status{}, err
	}
	restate.Clear(ctx, stateChain)
	st.Scheduled = false
	st.NextRun = time.Time{}
	restate.Set(ctx, stateStatus, st)
	return st, nil
}

// schedule sends the chain's next run to this key after delay and records
// its invocation, so that Start and Stop can cancel it.
func schedule(ctx restate.ObjectContext, chain string, delay time.Duration) {
	inv := restate.ObjectSend(ctx, ServiceName, restate.Key(ctx), "Run").Send(RunRequest{Chain: chain}, restate.WithDelay(delay))
	restate.Set(ctx, statePending, inv.GetInvocationId())
}

// cancelPending cancels the scheduled run, if any. Cancelling one that
// already ran or started is harmless: a running Run holds the object, so
// Start and Stop only run between runs.
func cancelPending(ctx restate.ObjectContext) error {
	id, err := restate.Get[string](ctx, statePending)
	if err != nil {
		return err
	}
	if id != "" {
		restate.CancelInvocation(ctx, id)
		restate.Clear(ctx, statePending)
	}
	return nil
}

// Status returns the schedule's status, and whether it is running (see
// Status.Running). It is a shared handler: it answers while a run is in
// progress, or retried.
func (c *Cleanup) Status(ctx restate.ObjectSharedContext) (Status, error) {
	st, err := restate.Get[Status](ctx, stateStatus)
	if err != nil {
		return Status{}, err
	}
	if !st.Scheduled || st.NextRun.IsZero() {
		return st, nil
	}
	now, nowErr := nowMs(ctx)
	if nowErr != nil {
		return Status{}, nowErr
	}
	overdue := time.UnixMilli(now).Sub(st.NextRun)
	st.OverdueSeconds = int64(max(overdue, 0) / time.Second)
	st.Running = overdue <= 2*time.Duration(st.IntervalSeconds)*time.Second+overdueGrace
	return st, nil
}

// overdueGrace is how late a run may start, beyond twice the interval,
// before Status reports the chain as not running: a run that deletes a
// backlog, or restate-server's retry after a worker's restart, takes
// seconds.
const overdueGrace = 10 * time.Second

// nowMs reads the worker's clock as a durable step, so that a replayed
// Start or Status sees the time its first attempt saw. Run's cutoff is the
// database's clock instead.
func nowMs(ctx restate.Context) (int64, error) {
	now, err := restate.Run(ctx, func(restate.RunContext) (int64, error) { return time.Now().UnixMilli(), nil },
		restate.WithName("now"))
	if err != nil {
		return 0, err
	}
	return now, nil
}
