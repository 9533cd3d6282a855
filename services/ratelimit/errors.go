package ratelimit

import (
	"errors"
	"fmt"
)

// ErrRegionRequired is returned by [New] when no region is given. The region
// names this process's component of every global counter, so a process
// without one could not publish or import counts correctly.
var ErrRegionRequired = errors.New("ratelimit: region is required")

// ErrRunning is returned by [Service.Run] when another Run of the same
// service has not returned yet.
var ErrRunning = errors.New("ratelimit: service already running")

// CapacityError is returned by [Service.Limit] and [Service.MultiLimit] for a
// request that would create a window in a workspace that already holds Max
// of them (see [WithMaxWindowsPerWorkspace]). Nothing is counted. Windows
// already held keep deciding; a window is freed once no request has used it
// for two of its durations.
type CapacityError struct {
	Max int64
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("workspace holds %d active windows, the most allowed; a window is freed once unused for two of its durations", e.Max)
}
