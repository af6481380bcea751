// Whether the machine gives this process the CPUs it asks for, and the thread count
// for work that cannot tolerate a missing thread (issue 36). Implemented with the
// pool in parallel.cpp, which switches its loops off OpenMP while contended.
#pragma once

namespace xpuruntime::cpu {

// Whether this process is short of CPU now: of the time the calling thread wanted a
// CPU lately, more than a fifth went to waiting for one (/proc/thread-self/schedstat),
// until that falls below a twelfth. XRT_CONTENTION=1 / 0 forces it (for measuring
// either path); without schedstat (not Linux) it is false.
bool host_contended();
// Threads for work that joins all its threads at the end (an OpenMP region: oneDNN's
// primitives, the OpenMP GEMM): parallel_threads(), but 1 inside a parallel_for chunk
// and on a contended machine, where a barrier would wait for a descheduled thread.
int blocking_threads();
// Tests: 1 / 0 forces host_contended(), -1 measures again.
void set_host_contended_for_testing(int state);

}  // namespace xpuruntime::cpu
