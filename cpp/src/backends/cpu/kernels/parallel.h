// The CPU ops' parallel loop. The calling thread always works: chunks are claimed
// from an atomic counter, in a fixed split (so results that depend on it keep their
// bits whichever thread runs a chunk).
//
// Built with OpenMP (the normal build: oneDNN's primitives run on OpenMP), the loop
// runs on the calling thread's OpenMP team while the machine is not contended, so our
// ops and oneDNN's share one set of workers; libgomp keeps them spinning briefly
// between regions, which is what back-to-back ops want on an idle machine. On a
// contended machine (contention.h: other processes, a CPU quota) an OpenMP region is a
// trap: it ends in a barrier that waits for every team thread, and a descheduled worker
// stalls each op for a scheduler timeslice while the others spin (issue 36). There, and
// always without OpenMP (the clang fuzzing build), loops run on a pool of our own:
// persistent helpers that spin 200 us (not at all while contended), then sleep on a
// condition variable; the caller claims chunks itself and never waits for a helper that
// has not started, so a helper without a core costs nothing.
//
// Threads: XRT_NUM_THREADS, else OMP_NUM_THREADS, else available_cpus() (host_threads.h:
// the affinity mask and the cgroup's CPU quota; the caller counts as one); a ThreadCap
// on the calling thread (a plan run under ExecutionPolicy.threads) sets another count
// for its loops. A parallel_for inside another runs inline on the calling thread; while
// another thread's job holds the pool, the calling thread runs the same chunks itself
// (no oversubscription when several sessions run at once). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>

namespace xpuruntime::cpu {

// fn(begin, end) over [0, n) in chunks. `work` estimates the total cost in
// element-operations; below kParallelGrain (cpu_op.h) everything runs inline.
void parallel_for(int64_t n, int64_t work, const std::function<void(int64_t, int64_t)>& fn);
// Threads parallel_for may use on the calling thread (helpers + the caller): the
// innermost ThreadCap's count, else default_threads().
int parallel_threads();
// The pool's count without a cap: XRT_NUM_THREADS, else OMP_NUM_THREADS, else
// available_cpus().
int default_threads();

// While alive, parallel_for on the constructing thread uses at most `threads` threads
// (the caller included); threads <= 0 changes nothing. Caps nest: the destructor
// restores the previous one. Create and destroy on the same thread.
class ThreadCap {
 public:
  explicit ThreadCap(int threads);
  ~ThreadCap();
  ThreadCap(const ThreadCap&) = delete;
  ThreadCap& operator=(const ThreadCap&) = delete;

 private:
  int previous_;
};

}  // namespace xpuruntime::cpu
