// Package storetest holds the contract suite every overrides store runs
// ([TestOverrides]): what package overrides relies on from its store,
// checked on the store itself. Package memstore (in memory) and package
// mysqlstore (MySQL) run it.
package storetest
