//go:build race

package transport

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// pooled code allocates under it.
const raceEnabled = true
