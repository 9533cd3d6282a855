//go:build !race

package wirecount

const raceEnabled = false
