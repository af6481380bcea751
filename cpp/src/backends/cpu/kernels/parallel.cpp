#include "backends/cpu/kernels/contention.h"
#include "backends/cpu/kernels/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/cpu/kernels/cpu_op.h"
#include "xpuruntime/host_threads.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__linux__)
#include <fcntl.h>
#include <unistd.h>
#endif

namespace xpuruntime::cpu {
namespace {

thread_local bool t_in_job = false;
// The calling thread's ThreadCap (0: none).
thread_local int t_cap = 0;

// How long a pool helper spins for the next job before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(200);

// ---- contention: does the calling thread get a CPU when it wants one? -------------
// Linux accounts each thread's time on a CPU and its time runnable but waiting for one
// (/proc/thread-self/schedstat: run ns, wait ns, timeslices). Of the time a plan's
// calling thread wanted a CPU, the share it spent waiting is the machine's contention
// as this process sees it: other processes' threads (a build, a busy server, a CPU
// quota) and ours (spinning workers). Above kEnter the process counts as contended
// until the share falls below kLeave (hysteresis, so it does not flap). Sampled at most
// every kSampleEvery on each calling thread, over at least kMinWindow of runnable time;
// one read costs a few microseconds. Elsewhere (no schedstat) never contended.
constexpr double kEnter = 0.20, kLeave = 0.08;
constexpr auto kSampleEvery = std::chrono::milliseconds(10);
constexpr int64_t kMinWindowNs = 4'000'000;

std::atomic<bool> g_contended{false};
std::atomic<int> g_contention_override{-1};  // -1: measured; 0/1: forced (tests, XRT_CONTENTION)

struct SchedSample {
  bool ok = false;
  int64_t run_ns = 0, wait_ns = 0;
};

SchedSample read_schedstat() {
  SchedSample s;
#if defined(__linux__)
  const int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return s;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return s;
  buf[n] = 0;
  char* end = nullptr;
  s.run_ns = std::strtoll(buf, &end, 10);
  s.wait_ns = std::strtoll(end, &end, 10);
  s.ok = end != buf;
#endif
  return s;
}

int contention_env() {
  const char* v = std::getenv("XRT_CONTENTION");  // "0"/"1": force; anything else: measure
  if (v && (v[0] == '0' || v[0] == '1') && v[1] == 0) return v[0] - '0';
  return -1;
}

// host_contended() without sampling (helpers have no caller's schedstat to read).
bool contended_state() {
  static const int forced = contention_env();
  const int o = g_contention_override.load(std::memory_order_relaxed);
  if (o >= 0) return o == 1;
  if (forced >= 0) return forced == 1;
  return g_contended.load(std::memory_order_relaxed);
}

void sample_contention() {
  struct Last {
    std::chrono::steady_clock::time_point at{};
    SchedSample s;
  };
  thread_local Last last;
  const auto now = std::chrono::steady_clock::now();
  if (now - last.at < kSampleEvery) return;
  const SchedSample s = read_schedstat();
  if (!s.ok) {
    last.at = now + std::chrono::hours(24);  // no schedstat here: stop asking
    return;
  }
  if (!last.s.ok) {
    last = {now, s};
    return;
  }
  const int64_t run = s.run_ns - last.s.run_ns, wait = s.wait_ns - last.s.wait_ns;
  if (run + wait < kMinWindowNs) return;  // too little runnable time yet: keep the window open
  const double share = static_cast<double>(wait) / static_cast<double>(run + wait);
  const bool was = g_contended.load(std::memory_order_relaxed);
  if (!was && share > kEnter) g_contended.store(true, std::memory_order_relaxed);
  if (was && share < kLeave) g_contended.store(false, std::memory_order_relaxed);
  last = {now, s};
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

struct Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0, chunks = 0;
  // Helpers that may still join (a capped job takes fewer than the pool has).
  std::atomic<int> seats{0};
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  // The first exception a chunk threw (rethrown on the calling thread once every chunk
  // is accounted for); later chunks are skipped but still counted done. An exception
  // must not leave a worker thread or an OpenMP region: either ends the process.
  std::atomic<bool> failed{false};
  std::exception_ptr error;

  void work() {
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks) return;
      if (!failed.load(std::memory_order_relaxed)) {
        try {
          (*fn)(n * c / chunks, n * (c + 1) / chunks);
        } catch (...) {
          if (!failed.exchange(true)) error = std::current_exception();
        }
      }
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

int env_threads() {
  for (const char* name : {"XRT_NUM_THREADS", "OMP_NUM_THREADS"}) {
    const char* v = std::getenv(name);
    const long long n = v ? std::strtoll(v, nullptr, 10) : 0;  // saturates, never overflows
    if (n > 0) return clamp_host_threads(n);
  }
  // The CPUs this process may use (affinity, the cgroup's CPU quota), not the machine's.
  return available_cpus();
}

class Pool {
 public:
  static Pool& instance() {
    static Pool* p = new Pool(env_threads());  // never destroyed: helpers outlive statics
    return *p;
  }

  // Starts helpers until the pool has `threads` threads (the caller included). With
  // OpenMP they start on the first contended job (an uncontended process runs its loops
  // on the OpenMP team and never needs them).
  void grow(int threads) {
    std::lock_guard<std::mutex> lk(grow_mu_);
    if (threads > target_.load(std::memory_order_relaxed)) target_.store(threads, std::memory_order_release);
#ifndef _OPENMP
    start_helpers_locked();
#endif
  }

  // fn over [0, n) on at most `threads` threads (the caller included).
  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int threads) {
    threads = std::min(threads, target());
    if (threads <= 1) {
      fn(0, n);
      return;
    }
    const int64_t chunks = std::min<int64_t>(n, 4 * threads);
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) {
      // Another thread's job holds the pool: work alone, over the same chunks and
      // nested loops inline as in a pooled job, so results that depend on the
      // split (a GEMM cut into column pieces) are the same bits either way.
      struct InJob {
        bool outer = t_in_job;
        InJob() { t_in_job = true; }
        ~InJob() { t_in_job = outer; }
      } in_job;
      for (int64_t c = 0; c < chunks; ++c) fn(n * c / chunks, n * (c + 1) / chunks);
      return;
    }
#ifdef _OPENMP
    // Uncontended, on the OpenMP team of the calling thread: the one oneDNN's primitives
    // (and torch's ops, one libgomp per process) run on, so a plan mixing our ops with
    // oneDNN's keeps one set of workers, hot between ops, instead of two sets spinning
    // against each other on the same cores. Same chunks as the pool below.
    if (!host_contended()) {
      Job job;
      job.fn = &fn;
      job.n = n;
      job.chunks = chunks;
#pragma omp parallel num_threads(threads)
      {
        t_in_job = true;
        job.work();
        t_in_job = false;
      }
      if (job.error) std::rethrow_exception(job.error);
      return;
    }
    // Contended: an OpenMP region ends in a barrier that waits for every thread of the
    // team, so one descheduled worker stalls the op for a timeslice while the others
    // spin. The pool below never waits for a helper that has not started.
    start_helpers();
#endif
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->n = n;
    job->chunks = chunks;
    job->seats.store(threads - 1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = job;
      ++gen_;
    }
    cv_.notify_all();
    t_in_job = true;
    job->work();
    t_in_job = false;
    // Every chunk is claimed now; wait only for chunks a helper is still running.
    while (job->done.load(std::memory_order_acquire) < job->chunks) std::this_thread::yield();
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_.reset();
    }
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  explicit Pool(int threads) { grow(threads); }
  int target() const { return target_.load(std::memory_order_acquire); }
  void start_helpers() {
    if (helpers_.load(std::memory_order_acquire) + 1 >= target()) return;
    std::lock_guard<std::mutex> lk(grow_mu_);
    start_helpers_locked();
  }
  void start_helpers_locked() {
    while (helpers_.load(std::memory_order_relaxed) + 1 < target_.load(std::memory_order_relaxed)) {
      std::thread([this] { loop(); }).detach();
      helpers_.fetch_add(1, std::memory_order_release);
    }
  }
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      // Spin a little before sleeping: a plan's ops follow each other within
      // microseconds, and waking a sleeping thread costs tens of microseconds
      // (more in a VM), as long as a small op itself, so without this the helper
      // would join small ops too late to take any chunk.
      // Not on a contended machine: there a spinning helper takes the CPU share of the
      // caller (the work it waits for runs there, and a oneDNN primitive runs on the
      // caller alone), so it sleeps at once and pays the wake-up instead.
      const auto spin_until =
          std::chrono::steady_clock::now() +
          (contended_state() ? std::chrono::microseconds(0) : kSpin);
      for (int i = 0; gen_.load(std::memory_order_acquire) == seen; ++i) {
        if ((i & 63) == 0 && std::chrono::steady_clock::now() > spin_until) break;
        cpu_relax();
      }
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return gen_.load(std::memory_order_relaxed) != seen; });
        seen = gen_.load(std::memory_order_relaxed);
        job = job_;
      }
      // No seat left: the job is capped below the pool's size.
      if (!job || job->seats.fetch_sub(1, std::memory_order_relaxed) <= 0) continue;
      t_in_job = true;
      job->work();
      t_in_job = false;
    }
  }

  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Job> job_;
  std::atomic<uint64_t> gen_{0};  // written under mu_, read lock-free while spinning
  std::mutex grow_mu_;
  std::atomic<int> target_{1};   // threads the pool may use (the caller included); only grows
  std::atomic<int> helpers_{0};  // detached helper threads; only grows
};

}  // namespace

int default_threads() {
  static const int n = std::min(env_threads(), max_host_threads());
  return n;
}

bool host_contended() {
  if (g_contention_override.load(std::memory_order_relaxed) < 0) sample_contention();
  return contended_state();
}

void set_host_contended_for_testing(int state) { g_contention_override.store(state < 0 ? -1 : state != 0); }

int blocking_threads() {
  if (t_in_job) return 1;
  return host_contended() ? 1 : std::max(1, parallel_threads());
}

// Uncapped loops keep the default even after a cap has grown the pool past it.
int parallel_threads() { return t_cap > 0 ? t_cap : default_threads(); }

ThreadCap::ThreadCap(int threads) : previous_(t_cap) {
  if (threads <= 0) return;
  // Clamped to what the process may start (host_threads.h): libgomp exit(1)s otherwise.
  t_cap = clamp_host_threads(threads);
  Pool::instance().grow(t_cap);
}

ThreadCap::~ThreadCap() { t_cap = previous_; }

void parallel_for(int64_t n, int64_t work, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || work < kParallelGrain || t_in_job) {
    fn(0, n);
    return;
  }
  Pool::instance().run(n, fn, parallel_threads());
}

}  // namespace xpuruntime::cpu
