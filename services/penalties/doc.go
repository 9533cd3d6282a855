// Package penalties keeps the penalty boxes: after a limit that asks for
// a penalty denies a request, its identifier is blocked in that namespace
// for the penalty, every decision denied until the block ends, whatever
// the window says; an offence again within one block's length after its
// end doubles the next block, up to a cap.
//
// A [Box] keeps every block that still matters in memory and answers
// [Box.Blocked] without I/O. It writes each new block through to a store
// ([store.Penalties]) in the background and [Box.Run] polls the store for
// the blocks other processes started, so that a block holds in every
// process of every region within a poll interval and survives a restart:
// MySQL (package mysqlstore) for a fleet, this process's memory (package
// memstore, the default) for one process. Writes merge, never replace
// (see [store.Merge]): a write replayed, duplicated or read late never
// undoes a newer one, and a store that fails leaves the blocks to each
// process's memory until it answers again.
package penalties
