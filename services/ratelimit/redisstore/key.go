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
// key): the cells of a window share their slot whatever the names hold,
// since a "}" in a name ends the tag early but still inside the part every
// cell shares. The tag is never empty: it starts with a length.
//
// A cell's refunds (store.CellKey.Refunds) are the cell's key and ":r",
// in the cell's slot; the totals each process gave back into them (see
// store.Increment.Writer) are a hash at that key and ":w".
//
//	ratelimit:v2:{<len>:<workspace><len>:<namespace><len>:<identifier>:<duration ms>}:<sequence>[:r[:w]]
func Key(c *store.CellKey) string {
	if store.IsPoolCode(c.Duration.Milliseconds()) {
		return poolPrefix(c) + poolMember(c) + refundsPart(c)
	}
	b := make([]byte, 0, 36+len(c.Workspace)+len(c.Namespace)+len(c.Identifier))
	b = append(b, "ratelimit:v2:{"...)
	b = appendNames(b, c)
	b = append(b, ':')
	b = strconv.AppendInt(b, c.Duration.Milliseconds(), 10)
	b = append(b, "}:"...)
	b = strconv.AppendInt(b, c.Sequence, 10)
	return string(b) + refundsPart(c)
}

// appendNames appends c's workspace, namespace and identifier, each
// prefixed by its length.
func appendNames(b []byte, c *store.CellKey) []byte {
	for _, part := range [...]string{c.Workspace, c.Namespace, c.Identifier} {
		b = strconv.AppendInt(b, int64(len(part)), 10)
		b = append(b, ':')
		b = append(b, part...)
	}
	return b
}

// refundsPart is what ends the key of c: refundsSuffix for a cell's
// refunds, nothing for the cell.
func refundsPart(c *store.CellKey) string {
	if c.Refunds {
		return refundsSuffix
	}
	return ""
}

// A concurrency limit's cells (see store.PoolCode) share one hash tag, the
// pool's names without a duration, so that a take reads every cell of the
// pool, whatever its grid, in one script on one node; an index beside them
// (a sorted set at the pool's prefix and "cells") holds each cell written,
// by member, scored by when its slots free themselves:
//
//	ratelimit:v2:{<len>:<workspace><len>:<namespace><len>:<identifier>:pool}:<code>:<sequence>[:r[:w]]
//	ratelimit:v2:{<len>:<workspace><len>:<namespace><len>:<identifier>:pool}:cells

// poolPrefix returns what every key of pool cell c's pool starts with.
func poolPrefix(c *store.CellKey) string {
	b := make([]byte, 0, 40+len(c.Workspace)+len(c.Namespace)+len(c.Identifier))
	b = append(b, "ratelimit:v2:{"...)
	b = appendNames(b, c)
	b = append(b, ":pool}:"...)
	return string(b)
}

// poolMember returns pool cell c's member in its pool's index: its key
// less the pool's prefix, and never its refunds'.
func poolMember(c *store.CellKey) string {
	b := make([]byte, 0, 32)
	b = strconv.AppendInt(b, c.Duration.Milliseconds(), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, c.Sequence, 10)
	return string(b)
}

// poolIndexSuffix follows a pool's prefix for its index.
const poolIndexSuffix = "cells"

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
