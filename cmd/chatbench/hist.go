package main

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// subBits sets the histogram's precision: each power of two is split into
// 1<<(subBits-1) buckets, so a recorded value is off by at most 1/64 (1.6%).
const subBits = 7

// histBuckets covers every value below 2^40 ns (18 minutes).
const histBuckets = (40 - subBits + 2) << (subBits - 1)

// hist is a log-linear latency histogram of durations in nanoseconds. Record
// is lock-free (one atomic add), so every subscriber goroutine can record
// into one shared hist without a mutex. The zero value is ready to use.
type hist struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Uint64
	max    atomic.Int64
}

// bucketOf maps v to its bucket: values below 1<<subBits exactly, larger
// ones with 1<<(subBits-1) buckets per power of two.
func bucketOf(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	e := bits.Len64(v) - subBits // >= 1: v>>e is in [half, 2*half)
	const half = 1 << (subBits - 1)
	return (e+1)*half + int(v>>e) - half
}

// bucketLow is the smallest value of bucket i; bucketOf(bucketLow(i)) == i.
func bucketLow(i int) uint64 {
	if i < 1<<subBits {
		return uint64(i)
	}
	const half = 1 << (subBits - 1)
	e := i/half - 1
	return uint64(i-e*half) << e
}

// Record adds one duration; negative durations count as 0, and durations
// beyond the range fall into the last bucket.
func (h *hist) Record(d time.Duration) {
	v := uint64(max(d, 0))
	i := bucketOf(v)
	if i >= histBuckets {
		i = histBuckets - 1
	}
	h.counts[i].Add(1)
	h.n.Add(1)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			break
		}
	}
}

// Count is the number of recorded values.
func (h *hist) Count() uint64 { return h.n.Load() }

// Max is the largest recorded value (exact).
func (h *hist) Max() time.Duration { return time.Duration(h.max.Load()) }

// Quantile returns the q-quantile (0 < q <= 1): the middle of the bucket
// that holds the ceil(q*n)-th smallest value, never more than Max. It is 0
// for an empty hist.
func (h *hist) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.999999)
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			lo := bucketLow(i)
			hi := bucketLow(i+1) - 1
			mid := time.Duration(lo + (hi-lo)/2)
			return min(mid, h.Max())
		}
	}
	return h.Max()
}
