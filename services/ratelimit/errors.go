package ratelimit

import "errors"

// ErrRegionRequired is returned by [New] when no region is given. The region
// names this process's component of every global counter, so a process
// without one could not publish or import counts correctly.
var ErrRegionRequired = errors.New("ratelimit: region is required")

// ErrClosed is returned by [Service.Run] when the service was closed before
// or while it ran.
var ErrClosed = errors.New("ratelimit: service closed")

// ErrRunning is returned by [Service.Run] when another Run of the same
// service has not returned yet.
var ErrRunning = errors.New("ratelimit: service already running")
