// Package store defines what the limiter needs of the stores that share its
// counts, as database/sql/driver does for database/sql: the regional store
// that the processes of one region share ([Regional], Redis in package
// redisstore) and the global store that the regions share ([Global], MySQL
// in package mysqlstore), and the values they exchange with the limiter.
//
// Both stores hold window cells: one fixed window of one key, named by a
// [CellKey]. A new store is checked against what the limiter relies on by
// the contract suites of package storetest, which also holds in-memory
// stores for tests.
package store
