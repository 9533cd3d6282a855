// Package storetest holds an in-memory overrides store ([Mem]) and the
// contract suite every overrides store runs ([TestOverrides]): what
// package overrides relies on from its store, checked on the store itself.
package storetest
