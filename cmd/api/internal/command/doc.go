// Package command holds api's commands other than serving: migrate, which
// applies the schema; rls check, which checks envoyproxy/ratelimit rule
// files as the server would load them; keys, which creates the first key
// in MySQL or generates one for a keys file; and config check, which reads
// the settings as serving would. package main dispatches
// to them; the tests call them as main does.
package command
