package rlsconfig

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// digester is the SHA-256 of a sequence of byte strings, each prefixed
// with its length, so that two sequences never share a digest by running
// into each other ("ab", "c" and "a", "bc"; a name and contents that
// hold a NUL). It tells whether rules changed: the files a source read,
// the resources an xDS response carried.
type digester struct {
	h hash.Hash
	n [8]byte
}

// newDigester returns an empty digester.
func newDigester() *digester { return &digester{h: sha256.New()} }

// add appends b to the sequence.
func (d *digester) add(b []byte) {
	binary.LittleEndian.PutUint64(d.n[:], uint64(len(b)))
	d.h.Write(d.n[:])
	d.h.Write(b)
}

// sum returns the digest of the sequence so far.
func (d *digester) sum() [sha256.Size]byte {
	var out [sha256.Size]byte
	d.h.Sum(out[:0])
	return out
}
