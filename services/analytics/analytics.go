// Package analytics counts who is being limited: per workspace, namespace
// and minute, the decisions that passed and were denied, and the
// identifiers most denied and busiest, found by heavy-hitter sketches in
// bounded memory. A Recorder in each API process aggregates decisions off
// the request path and adds them to a Store every flush interval; the
// worker rolls minutes up to hours and days and purges them past their
// retention (package cleanup); a Store answers the series and top
// identifiers of a namespace across every process and region.
package analytics

import (
	"time"

	"github.com/unkeyed/ratelimit/services/analytics/store"
)

// The vocabulary of the analytics, defined with the contract of their
// stores (package store).
type (
	Granularity = store.Granularity
	Bucket      = store.Bucket
	Entry       = store.Entry
	Point       = store.Point
	Identifier  = store.Identifier
	Process     = store.Process
	Store       = store.Store
	Fleet       = store.Fleet
)

// The granularities, as the tables store them.
const (
	Minute = store.Minute
	Hour   = store.Hour
	Day    = store.Day
)

// Retention: what the tables keep of each granularity. A query reads each
// span of time from the finest granularity that holds it: the last
// MinuteSpan from minutes, back to HourSpan from hours, older from days.
const (
	MinuteRetention = 25 * time.Hour
	HourRetention   = 32 * 24 * time.Hour
	DayRetention    = 400 * 24 * time.Hour
	MinuteSpan      = 24 * time.Hour
	HourSpan        = 31 * 24 * time.Hour
	// ProcessRetention is how long the roll call keeps a process that
	// stopped reporting: a day of gone processes on the dashboard.
	ProcessRetention = 24 * time.Hour
)
