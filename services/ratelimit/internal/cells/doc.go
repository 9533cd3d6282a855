// Package cells is the limiter's cell table: every window the process
// holds, by key, each with its two most recent cells (the admitted counts
// of one fixed period of one key, this region's and the others'), the
// janitor's walk that removes the idle ones, the locks of contended keys
// and the batch protocol of speculative counts.
//
// It knows no model and no tier: a window's period (package
// internal/period) says what its cells are, and what a model or a tier
// keeps beside a window (a token bucket's level, a writer's totals, a
// group of windows) lives in a [Companion] the table tells of each window
// it files and removes. So a model or a tier imports cells, and cells
// imports neither.
package cells
