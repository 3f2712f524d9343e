package transport_test

import (
	"math"
	"runtime/metrics"
	"slices"
	"time"
)

// benchSched is a count of the runtime's /sched/latencies:seconds: how
// long goroutines waited runnable before they ran, for every time one
// was scheduled. It is the process's, every goroutine's (the server's and
// the benchmark's clients'), and it does not depend on the round trips'
// own noise as their p99 does: a goroutine that finds no free P (every P
// held, or the thread that holds one not run by the kernel) waits here.
type benchSched struct {
	counts  []uint64
	buckets []float64 // len(counts)+1 boundaries, in seconds
}

// readBenchSched is the histogram so far.
func readBenchSched() benchSched { return readBenchHist("/sched/latencies:seconds") }

// readBenchHist is the runtime/metrics histogram name (of seconds) so
// far: /sched/latencies:seconds, or another of the same kind.
func readBenchHist(name string) benchSched {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	h := s[0].Value.Float64Histogram()
	return benchSched{counts: slices.Clone(h.Counts), buckets: h.Buckets}
}

// sub is s less o (the waits between two reads).
func (s benchSched) sub(o benchSched) benchSched {
	d := benchSched{counts: slices.Clone(s.counts), buckets: s.buckets}
	for i := range o.counts {
		d.counts[i] -= o.counts[i]
	}
	return d
}

// add is s and o's waits together (o of the same buckets, or none).
func (s benchSched) add(o benchSched) benchSched {
	if s.counts == nil {
		return o
	}
	d := benchSched{counts: slices.Clone(s.counts), buckets: s.buckets}
	for i := range o.counts {
		d.counts[i] += o.counts[i]
	}
	return d
}

// quantile is the q-th quantile (0 < q < 1) of the waits: the upper bound
// of the bucket it falls in (its lower bound for the last, unbounded one).
func (s benchSched) quantile(q float64) time.Duration {
	var total uint64
	for _, c := range s.counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range s.counts {
		seen += c
		if seen >= want {
			bound := s.buckets[i+1]
			if math.IsInf(bound, 1) {
				bound = s.buckets[i]
			}
			return time.Duration(bound * float64(time.Second))
		}
	}
	return 0
}

// max is the upper bound of the highest bucket with a count (its lower
// bound if it is the last, unbounded one), 0 if none has.
func (s benchSched) max() time.Duration {
	for i := len(s.counts) - 1; i >= 0; i-- {
		if s.counts[i] == 0 {
			continue
		}
		bound := s.buckets[i+1]
		if math.IsInf(bound, 1) {
			bound = s.buckets[i]
		}
		return time.Duration(bound * float64(time.Second))
	}
	return 0
}

// over is the count of the buckets whose lower bound is d or more.
func (s benchSched) over(d time.Duration) uint64 {
	var n uint64
	for i, c := range s.counts {
		if s.buckets[i] >= d.Seconds() {
			n += c
		}
	}
	return n
}

// benchUS is d in microseconds.
func benchUS(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
