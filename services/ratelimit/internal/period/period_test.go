package period_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// periods returns one period of each kind and a few of each.
func periods(t *testing.T) []period.Period {
	t.Helper()
	berlin, err := calendar.New(calendar.Month, "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	day, err := calendar.New(calendar.Day, "")
	if err != nil {
		t.Fatal(err)
	}
	return []period.Period{
		period.OfLength(1000), period.OfLength(60_000), period.OfLength(365 * 24 * 3_600_000),
		period.OfCalendar(berlin), period.OfCalendar(day),
		period.BucketCells(store.MinBucketShift), period.BucketCells(20), period.BucketCells(store.MaxBucketShift),
		period.PoolCell(0, 1_764_000_000), period.PoolCell(3, 220_500_000), period.PoolCell(store.MaxPoolShift, 6_890_625),
		period.BucketCells(store.MinBucketShift).Given(), period.BucketCells(20).Given(), period.BucketCells(store.MaxBucketShift).Given(),
	}
}

// TestGiven: the tokens given back to a bucket are on its cells' grid,
// of a kind of their own, and name the bucket back; no other period has
// them.
func TestGiven(t *testing.T) {
	for _, shift := range []int64{store.MinBucketShift, 20, store.MaxBucketShift} {
		b := period.BucketCells(shift)
		g := b.Given()
		if g.Kind() != period.Given || g.Bucket() != b || g.Ms() != b.Ms() || g == b {
			t.Fatalf("BucketCells(%d).Given() = %+v: kind %v, Bucket() %+v, %d ms", shift, g, g.Kind(), g.Bucket(), g.Ms())
		}
		for _, now := range []int64{1_700_000_000_000, 1_700_000_000_000 + 3<<shift + 17} {
			gs, gStart, gEnd := g.At(now)
			bs, bStart, bEnd := b.At(now)
			if gs != bs || gStart != bStart || gEnd != bEnd || g.ExpiresAt(gs) != b.ExpiresAt(bs) {
				t.Fatalf("shift %d at %d: given cell %d [%d, %d) expires %d, the bucket's %d [%d, %d) expires %d",
					shift, now, gs, gStart, gEnd, g.ExpiresAt(gs), bs, bStart, bEnd, b.ExpiresAt(bs))
			}
		}
	}
	for _, p := range []period.Period{period.OfLength(60_000), period.PoolCell(0, 5)} {
		if g := p.Given(); g != (period.Period{}) {
			t.Fatalf("%v.Given() = %+v, want none", p.Kind(), g)
		}
		if p.Bucket() != p {
			t.Fatalf("%v.Bucket() = %+v, want itself", p.Kind(), p.Bucket())
		}
	}
}

// TestCodeRoundTrips checks that every period is named by a code the
// stores can hold (a time.Duration of whole ms) and read back as itself,
// and that no two periods share a code or (here) a hash.
func TestCodeRoundTrips(t *testing.T) {
	codes := map[int64]period.Period{}
	hashes := map[uint64]period.Period{}
	for _, p := range periods(t) {
		code := p.Code()
		if code <= 0 || time.Duration(code)*time.Millisecond <= 0 {
			t.Fatalf("%v %+v: code %d does not fit a store's duration", p.Kind(), p, code)
		}
		back, ok := period.FromCode(code)
		if !ok || back != p {
			t.Fatalf("FromCode(%d) = %+v, %v; want %+v", code, back, ok, p)
		}
		if o, dup := codes[code]; dup {
			t.Fatalf("%+v and %+v share code %d", o, p, code)
		}
		codes[code] = p
		if o, dup := hashes[p.Hash()]; dup {
			t.Fatalf("%+v and %+v share hash %d", o, p, p.Hash())
		}
		hashes[p.Hash()] = p
	}
	for _, code := range []int64{0, -5} {
		if p, ok := period.FromCode(code); ok {
			t.Fatalf("FromCode(%d) = %+v, want none", code, p)
		}
	}
	// A calendar this process never made is known by no code.
	unknown := calendar.MinCode | int64(calendar.Week)<<37 | 12345
	if p, ok := period.FromCode(unknown); ok {
		t.Fatalf("FromCode(an unknown calendar's code) = %+v, want none", p)
	}
}

// TestCells checks each kind's arithmetic against first principles at
// random instants: the cell At names holds now and starts where Start
// says, cells of fixed length are that long, a calendar's are its
// periods, a pool's window holds its own cell until it ends and then one
// two past it, and a cell expires after it ends, no earlier than the
// stores drop it.
func TestCells(t *testing.T) {
	rng := rand.New(rand.NewPCG(57, 2))
	for _, p := range periods(t) {
		for range 2000 {
			now := 1_700_000_000_000 + rng.Int64N(400*24*3_600_000)
			seq, start, end := p.At(now)
			if p.Kind() == period.Pool {
				cell := p.Cell()
				g := p.Ms()
				if now < p.CellEnd() {
					if seq != cell || end != p.CellEnd() || start != end-g {
						t.Fatalf("pool %+v at %d: At = %d [%d, %d), want its cell %d ending %d", p, now, seq, start, end, cell, p.CellEnd())
					}
				} else if seq != cell+2 {
					t.Fatalf("pool %+v at %d (after its end): cell %d, want %d", p, now, seq, cell+2)
				}
				if !p.Holds(cell) || p.Holds(cell+2) || p.Holds(cell-1) {
					t.Fatalf("pool %+v: Holds must be true of its own cell alone", p)
				}
				if got := p.Start(seq); got != start {
					t.Fatalf("pool %+v: Start(%d) = %d, At said %d", p, seq, got, start)
				}
				continue
			}
			if start > now || now >= end {
				t.Fatalf("%+v at %d: cell %d [%d, %d) does not hold it", p, now, seq, start, end)
			}
			if got := p.Start(seq); got != start {
				t.Fatalf("%+v: Start(%d) = %d, At said %d", p, seq, got, start)
			}
			if got := p.Start(seq + 1); got != end {
				t.Fatalf("%+v: Start(%d) = %d, want the cell's end %d", p, seq+1, got, end)
			}
			switch p.Kind() {
			case period.Calendar:
				i, s, e := p.Calendar().Bounds(time.UnixMilli(now))
				if i != seq || s.UnixMilli() != start || e.UnixMilli() != end {
					t.Fatalf("%+v at %d: At = %d [%d, %d), calendar says %d [%v, %v)", p, now, seq, start, end, i, s, e)
				}
				if got := p.StrictSpan(now); got != end-now {
					t.Fatalf("%+v: StrictSpan = %d, want the rest of the period %d", p, got, end-now)
				}
				if end-start < p.Ms() {
					t.Fatalf("%+v: a period of %d ms is shorter than Ms %d", p, end-start, p.Ms())
				}
			default:
				if end-start != p.Ms() || p.StrictSpan(now) != p.Ms() {
					t.Fatalf("%+v: cell of %d ms, want %d", p, end-start, p.Ms())
				}
			}
			if exp := p.ExpiresAt(seq); exp < p.Start(seq+2) {
				t.Fatalf("%+v: cell %d expires at %d, before the next cell ends (%d)", p, seq, exp, p.Start(seq+2))
			}
			if exp, stores := p.ExpiresAt(seq), store.ExpiresAt(seq, p.Code()); exp != stores {
				t.Fatalf("%+v: ExpiresAt = %d, the stores keep the cell until %d", p, exp, stores)
			}
			if l := p.Latest(now); l < seq+1 {
				t.Fatalf("%+v: Latest(%d) = %d, before the next cell %d", p, now, l, seq+1)
			}
		}
	}
}

// TestForLease checks that a slot is counted in the first cell of its
// lease's grid that ends no earlier than its expiry, less than a cell
// (at most a second or a tenth of its lease) later.
func TestForLease(t *testing.T) {
	rng := rand.New(rand.NewPCG(57, 3))
	for range 5000 {
		lease := store.MinLeaseMs + rng.Int64N(store.MaxLeaseMs-store.MinLeaseMs+1)
		now := 1_700_000_000_000 + rng.Int64N(1e9)
		p := period.ForLease(lease, now)
		if p.Kind() != period.Pool {
			t.Fatalf("ForLease: kind %v", p.Kind())
		}
		late := p.CellEnd() - (now + lease)
		if late < 0 || late >= p.Ms() || late > max(1000, lease/10) {
			t.Fatalf("lease %d ms at %d: frees %d ms after its expiry (grid %d ms)", lease, now, late, p.Ms())
		}
	}
}
