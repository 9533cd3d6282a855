package reservation

import (
	"encoding/hex"
)

// NewProcessID returns a random name for this process's ledger scope.
func NewProcessID() string {
	id := NewID()
	return hex.EncodeToString(id[:8])
}
