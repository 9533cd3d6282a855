// Package testserver starts private instances of the servers the tests need
// (Redis, MariaDB, restate-server) as child processes on free loopback ports
// in temporary directories. Tests never touch a machine's shared instances and
// can stop, kill and restart their own to test faults.
package testserver
