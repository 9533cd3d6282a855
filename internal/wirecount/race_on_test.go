//go:build race

package wirecount

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// pooled code allocates under it.
const raceEnabled = true
