// Package audit records every change of a key or an override (and every
// penalty lifted): who made it
// (the acting key's id), what (an action), to what (a target), the values
// before and after, when (the store's clock) and under which request id.
// A [store.Log] keeps the entries: MySQL's ratelimit_audit_log (package
// mysqlstore), or this process's memory (package memstore) without MySQL;
// the worker's cleanup deletes those older than [Retention]. The contract
// suite every store runs is in package storetest.
package audit

import (
	"strings"
	"time"
)

// Retention is how long the audit log keeps an entry: a quarter, long
// enough to answer "who changed this" after an incident review, short
// enough to bound the table. The worker's cleanup deletes older entries.
const Retention = 90 * 24 * time.Hour

// The actions an entry records.
const (
	KeyCreate      = "key.create"
	KeyUpdate      = "key.update"
	KeyRevoke      = "key.revoke"
	OverrideCreate = "override.create"
	OverrideUpdate = "override.update"
	OverrideDelete = "override.delete"
	// PenaltyDelete is a penalty's block lifted before its end; its
	// target is named as an override's.
	PenaltyDelete = "penalty.delete"
)

// Actions are every action, for validating a filter.
var Actions = []string{KeyCreate, KeyUpdate, KeyRevoke, OverrideCreate, OverrideUpdate, OverrideDelete, PenaltyDelete}

// OverrideTarget names an override as an entry's target:
// "<namespace>/<identifier>", the namespace's "%" and "/" escaped as %25 and
// %2F so that the first "/" always ends it (a namespace "a/b" with
// identifier "c" and a namespace "a" with identifier "b/c" are two
// targets).
func OverrideTarget(namespace, identifier string) string {
	return targetEscaper.Replace(namespace) + "/" + identifier
}

var targetEscaper = strings.NewReplacer("%", "%25", "/", "%2F")
