// Package overrides replaces the limit and duration a caller sends for
// chosen identifiers of a namespace, at runtime and without a redeploy.
//
// An override names a workspace, a namespace and an identifier, or a pattern
// in which * stands for any run of characters (none included). A request
// takes the override of its exact identifier if there is one; otherwise the
// most specific pattern that matches it: the one with the most bytes
// besides *, then the one with fewer *, then the one whose pattern sorts
// first byte by byte. For example, with the patterns "user_*", "user_4*" and
// "*_42", identifier "user_42" takes "user_4*" (6 literal bytes, against 5
// and 3), "user_7" takes "user_*", and "bot_42" takes "*_42".
//
// A [Registry] keeps every override in memory and answers
// [Registry.Lookup] without I/O. It writes through to a store
// ([store.Overrides]) and [Registry.Run] polls it for other processes'
// changes: MySQL (package mysqlstore) for a fleet, or this process's memory
// (package memstore, the default) for a single process.
package overrides
