package transport_test

import (
	"runtime/metrics"
	"time"
)

// benchGC is the collector's work in this process so far, from
// runtime/metrics: its cycles, its CPU (the runtime's estimate, by class:
// /cpu/classes/gc/...: the mark's assists, its dedicated and idle workers,
// the pauses), its stop-the-world pauses (/sched/pauses/total/gc: each
// cycle's two, from the stop's request to the start's end), the heap's
// allocations, and this process's CPU (getrusage) beside them. The
// benchmarks read it before and after a phase: what the posts of that
// phase, and the push or the uploads beside them, cost the collector.
type benchGC struct {
	cycles          uint64
	bytes, objects  uint64
	gc, assist      time.Duration // all the collector's CPU; of it, the goroutines' assists
	workers, pauses time.Duration // the mark workers (dedicated, fractional and idle); the pauses' CPU
	cpu             time.Duration // this process's CPU, user and system
	pause           benchSched    // the pauses' lengths
	stopping        benchSched    // of them, the time to stop every P (a P's goroutine preempted, its thread run)
}

var benchGCNames = []string{
	"/gc/cycles/total:gc-cycles",
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/gc/mark/assist:cpu-seconds",
	"/cpu/classes/gc/mark/dedicated:cpu-seconds",
	"/cpu/classes/gc/mark/idle:cpu-seconds",
	"/cpu/classes/gc/pause:cpu-seconds",
}

// readBenchGC is the collector's work so far.
func readBenchGC() benchGC {
	s := make([]metrics.Sample, len(benchGCNames))
	for i, n := range benchGCNames {
		s[i].Name = n
	}
	metrics.Read(s)
	sec := func(i int) time.Duration { return time.Duration(s[i].Value.Float64() * float64(time.Second)) }
	return benchGC{
		cycles: s[0].Value.Uint64(), bytes: s[1].Value.Uint64(), objects: s[2].Value.Uint64(),
		gc: sec(3), assist: sec(4), workers: sec(5) + sec(6), pauses: sec(7),
		cpu:      processCPU(),
		pause:    readBenchHist("/sched/pauses/total/gc:seconds"),
		stopping: readBenchHist("/sched/pauses/stopping/gc:seconds"),
	}
}

// sub is g less o: the work between two reads.
func (g benchGC) sub(o benchGC) benchGC {
	return benchGC{
		cycles: g.cycles - o.cycles, bytes: g.bytes - o.bytes, objects: g.objects - o.objects,
		gc: g.gc - o.gc, assist: g.assist - o.assist, workers: g.workers - o.workers, pauses: g.pauses - o.pauses,
		cpu: g.cpu - o.cpu, pause: g.pause.sub(o.pause), stopping: g.stopping.sub(o.stopping),
	}
}

// add is g and o's work together.
func (g benchGC) add(o benchGC) benchGC {
	return benchGC{
		cycles: g.cycles + o.cycles, bytes: g.bytes + o.bytes, objects: g.objects + o.objects,
		gc: g.gc + o.gc, assist: g.assist + o.assist, workers: g.workers + o.workers, pauses: g.pauses + o.pauses,
		cpu: g.cpu + o.cpu, pause: g.pause.add(o.pause), stopping: g.stopping.add(o.stopping),
	}
}

// share is the collector's CPU as a part of the process's (the runtime's
// estimate over getrusage's count; an idle mark worker's time is counted
// as the collector's though the kernel may not have run it all).
func (g benchGC) share() float64 {
	if g.cpu <= 0 {
		return 0
	}
	return float64(g.gc) / float64(g.cpu)
}

// report gives r (a b.ReportMetric) g's figures as phase's, whose posts
// were posts: its cycles, the collector's CPU and its assists in ms, each
// per 1 000 posts (phases of different lengths compare), the collector's
// share of the process's CPU, the pauses' median and longest in µs, the
// longest wait to stop the world (from a pause's request until every P
// stopped: a P's goroutine on a thread the kernel does not run holds the
// world's stop, and every other goroutine, until it runs) and how many
// waits took 1 ms or more.
func (g benchGC) report(r func(float64, string), phase string, posts int) {
	per := func(v float64) float64 { return v * 1000 / float64(max(posts, 1)) }
	r(per(float64(g.cycles)), "gc-cycles/kpost-"+phase)
	r(per(benchMS(g.gc)), "gc-ms/kpost-"+phase)
	r(per(benchMS(g.assist)), "gc-assist-ms/kpost-"+phase)
	r(g.share(), "gc-share-"+phase)
	r(benchUS(g.pause.quantile(0.5)), "gc-pause-p50-us-"+phase)
	r(benchUS(g.pause.max()), "gc-pause-max-us-"+phase)
	r(benchUS(g.stopping.max()), "gc-stop-max-us-"+phase)
	r(float64(g.stopping.over(time.Millisecond)), "gc-stops-1ms-"+phase)
}
