package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/unkeyed/ratelimit/workflows/cleanup"
)

// scheduleHealth is the cleanup schedule's health as the worker serves it
// to Prometheus, from the schedule's own Status read through the ingress:
// an alert on unkey_worker_cleanup_running == 0 catches a schedule that
// stopped, whatever stopped it.
type scheduleHealth struct {
	reg                          *prometheus.Registry
	running, overdue, lastRun    prometheus.Gauge
	totalDeleted, statusFailures prometheus.Gauge
	readErrors                   prometheus.Counter
}

func newScheduleHealth() *scheduleHealth {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	h := &scheduleHealth{
		reg: prometheus.NewRegistry(),
		running: gauge("unkey_worker_cleanup_running",
			"1 while the cleanup schedule is running (its next run not overdue by more than twice its interval and 10 s), 0 when it is not (stopped, or waiting on a worker or database that is down), -1 before its status was read."),
		overdue:      gauge("unkey_worker_cleanup_overdue_seconds", "How long the cleanup schedule's next run is past its time."),
		lastRun:      gauge("unkey_worker_cleanup_last_run_timestamp_seconds", "When the latest cleanup run began, in unix seconds (0 before the first)."),
		totalDeleted: gauge("unkey_worker_cleanup_deleted_rows", "Expired window-count rows the cleanup schedule has deleted in all."),
		statusFailures: gauge("unkey_worker_cleanup_status_failing",
			"1 while the cleanup schedule's status cannot be read through restate-server's ingress, else 0."),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "unkey_worker_cleanup_status_errors_total",
			Help: "Failed reads of the cleanup schedule's status."}),
	}
	h.running.Set(-1)
	h.reg.MustRegister(h.running, h.overdue, h.lastRun, h.totalDeleted, h.statusFailures, h.readErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return h
}

// handler serves the metrics.
func (h *scheduleHealth) handler() http.Handler {
	return promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{Registry: h.reg})
}

// set records a status read.
func (h *scheduleHealth) set(st cleanup.Status) {
	h.statusFailures.Set(0)
	if st.Running {
		h.running.Set(1)
	} else {
		h.running.Set(0)
	}
	h.overdue.Set(float64(st.OverdueSeconds))
	if !st.LastRun.IsZero() {
		h.lastRun.Set(float64(st.LastRun.Unix()))
	}
	h.totalDeleted.Set(float64(st.TotalDeleted))
}

// failed records a read that failed. A schedule whose status cannot be read
// is not known to run (restate-server or its ingress is down, and with it
// every run), so running drops to 0 and the alert on it fires.
func (h *scheduleHealth) failed() {
	h.running.Set(0)
	h.statusFailures.Set(1)
	h.readErrors.Inc()
}

// watchHealth reads the cleanup schedule's status every healthEvery until
// ctx is done.
func (w *worker) watchHealth(ctx context.Context) {
	url := fmt.Sprintf("%s/%s/%s/Status", strings.TrimSuffix(w.cfg.IngressURL, "/"), cleanup.ServiceName, cleanup.DefaultKey)
	t := time.NewTicker(w.healthEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		out, err := w.postFor(ctx, url, nil)
		var st cleanup.Status
		if err == nil {
			err = json.Unmarshal(out, &st)
		}
		if err != nil {
			if ctx.Err() == nil {
				w.health.failed()
				w.logger.Debug("read the cleanup schedule's status", "error", err)
			}
			continue
		}
		w.health.set(st)
	}
}
