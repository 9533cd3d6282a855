package reservation

import (
	"errors"
	"fmt"
)

// SettledError answers a reservation settled before: it gives back nothing
// more and counts nothing more.
type SettledError struct {
	// Cost is what the first settle said was spent.
	Cost int64
}

func (e *SettledError) Error() string {
	return fmt.Sprintf("reservation: already settled (at cost %d); a reservation settles once", e.Cost)
}

// ErrUnavailable answers a settle this process cannot verify yet: the secret the processes share could not be read.
var ErrUnavailable = errors.New("reservations unavailable: the shared reservation secret cannot be read yet (MySQL or Redis is down); try again")
