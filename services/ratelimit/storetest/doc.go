// Package storetest holds in-memory stores for tests and the contract suites
// that every store of the limiter runs, as testing/fstest does for file
// systems: [MemRegional] and [MemGlobal] behave as package redisstore and
// package mysqlstore do on real servers; [FaultyRegional] and
// [FaultyGlobal] wrap any store, in memory or real, with faults a test
// switches on, as pebble's errorfs wraps any file system;
// [CountingRegional] counts a MemRegional's calls for tests that bound
// round trips; [TestRegional]
// and [TestGlobal] check a store against what the limiter relies on. A new
// store passes the suite before the limiter meets it.
package storetest
