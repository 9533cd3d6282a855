package redisstore

import (
	"strconv"
	"strings"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Key returns the Redis key of a cell: every variable part is prefixed
// by its length, so parts can never run into each other: namespace "a-b" with
// identifier "c" and namespace "a" with identifier "b-c" are different keys.
// Everything but the sequence is the key's hash tag (between the first "{"
// and the first "}" after it, which Redis Cluster hashes instead of the whole
// key): the two cells of a window share their slot whatever the names hold,
// since a "}" in a name ends the tag early but still inside the part both
// cells share. The tag is never empty: it starts with a length.
//
// A cell's refunds (store.CellKey.Refunds) are the cell's key and ":r",
// in the cell's slot; the totals each process gave back into them (see
// store.Increment.Writer) are a hash at that key and ":w".
//
//	ratelimit:v2:{<len>:<workspace><len>:<namespace><len>:<identifier>:<duration ms>}:<sequence>[:r[:w]]
func Key(c *store.CellKey) string {
	b := make([]byte, 0, 36+len(c.Workspace)+len(c.Namespace)+len(c.Identifier))
	b = append(b, "ratelimit:v2:{"...)
	for _, part := range [...]string{c.Workspace, c.Namespace, c.Identifier} {
		b = strconv.AppendInt(b, int64(len(part)), 10)
		b = append(b, ':')
		b = append(b, part...)
	}
	b = append(b, ':')
	b = strconv.AppendInt(b, c.Duration.Milliseconds(), 10)
	b = append(b, "}:"...)
	b = strconv.AppendInt(b, c.Sequence, 10)
	if c.Refunds {
		b = append(b, refundsSuffix...)
	}
	return string(b)
}

// refundsSuffix ends the key of a cell's refunds.
const refundsSuffix = ":r"

// writersSuffix follows the key of a cell written as totals (a cell of
// refunds, or of a concurrency limit's slots) for the hash of its writers' totals.
const writersSuffix = ":w"

// slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of
// its hash tag, or of the whole key without one, modulo 16384.
func slot(key string) uint16 {
	if start := strings.IndexByte(key, '{'); start >= 0 {
		if end := strings.IndexByte(key[start+1:], '}'); end > 0 {
			key = key[start+1 : start+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
