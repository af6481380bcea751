// How many host threads this process may run its parallel loops on (issue 35 §4).
//
// ExecutionPolicy.threads, a plan header's threads and XRT_NUM_THREADS/OMP_NUM_THREADS
// are requests; the CPU loops run on at most max_host_threads() threads. Above that a
// request is clamped (the compiler records the clamp in the native:threads Decision):
// asking libgomp for more threads than the process may start makes it print an error
// and exit(1), which ends the process without a typed error.
#pragma once

#include <string>

namespace xpuruntime {

// The bound, computed once per process: 8 threads per CPU this process may run on
// (sched_getaffinity), at least 64, at most 1024, and at most half the threads the
// process may still start (cgroup pids.max - pids.current, RLIMIT_NPROC - threads now).
int max_host_threads();

// `requested` clamped to [0, max_host_threads()] (0, the default, stays 0).
int clamp_host_threads(long long requested);

// The CPUs this process may keep busy, computed once: the affinity mask's CPU count
// (sched_getaffinity), lowered to the cgroup's CPU quota rounded up (cgroup v2 cpu.max,
// v1 cpu.cfs_quota_us / cpu.cfs_period_us; a container given 1.5 CPUs gets 2). The
// default thread count of the CPU loops; at least 1.
int available_cpus();
// Why available_cpus() is what it is ("2 (affinity 2 CPUs; no cgroup CPU quota)").
std::string available_cpus_reason();

// Why the bound is what it is, for messages and Decisions ("64 (2 CPUs x 8, ...)").
std::string host_threads_reason();

}  // namespace xpuruntime
