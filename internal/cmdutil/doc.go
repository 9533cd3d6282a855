// Package cmdutil holds what the api and worker commands share: log setup,
// the MySQL DSN and pool, and the HTTP protocols they serve. Errors name
// the environment variable a value came from.
package cmdutil
