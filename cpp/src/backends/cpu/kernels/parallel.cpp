#include "backends/cpu/kernels/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/cpu/kernels/cpu_op.h"
#include "xpuruntime/host_threads.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace xpuruntime::cpu {
namespace {

thread_local bool t_in_job = false;
// The calling thread's ThreadCap (0: none).
thread_local int t_cap = 0;

constexpr auto kSpin = std::chrono::microseconds(200);

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
  return std::max(1u, std::thread::hardware_concurrency());
}

class Pool {
 public:
  static Pool& instance() {
    static Pool* p = new Pool(env_threads());  // never destroyed: helpers outlive statics
    return *p;
  }
  int threads() const { return helpers_.load(std::memory_order_acquire) + 1; }

  // Starts helpers until the pool has `threads` threads (the caller included).
  void grow(int threads) {
    std::lock_guard<std::mutex> lk(grow_mu_);
    while (helpers_.load(std::memory_order_relaxed) + 1 < threads) {
#ifndef _OPENMP  // with OpenMP the runtime starts the team's threads (run())
      std::thread([this] { loop(); }).detach();
#endif
      helpers_.fetch_add(1, std::memory_order_release);
    }
  }

  // fn over [0, n) on at most `threads` threads (the caller included).
  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int threads) {
    threads = std::min(threads, this->threads());
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
    // On the OpenMP team of the calling thread: the one oneDNN's primitives (and
    // torch's ops, one libgomp per process) run on, so a plan mixing our ops with
    // oneDNN's keeps one set of workers, hot between ops, instead of two sets
    // spinning against each other on the same cores. Same chunks as the pool below.
    {
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
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      // Spin a little before sleeping: a plan's ops follow each other within
      // microseconds, and waking a sleeping thread costs tens of microseconds
      // (more in a VM), as long as a small op itself, so without this the helper
      // would join small ops too late to take any chunk.
      const auto spin_until = std::chrono::steady_clock::now() + kSpin;
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
  std::atomic<int> helpers_{0};  // detached helper threads; only grows
};

}  // namespace

int default_threads() {
  static const int n = std::min(env_threads(), max_host_threads());
  return n;
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
