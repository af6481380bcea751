#include "xpuruntime/host_threads.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#include <sys/resource.h>
#endif

namespace xpuruntime {
namespace {

constexpr int kPerCpu = 8;      // more compute threads than this per core only oversubscribe
constexpr int kFloor = 64;      // a request this small is always honoured
constexpr int kCeiling = 1024;  // above this a request is a typo, not a machine

struct Limit {
  int value = kFloor;
  std::string reason;
};

// A number read from the first line of a file ("max" and unreadable files: -1).
long long read_number(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 18)
    return -1;
  return std::stoll(s);
}

#if defined(__linux__)
// This process's cgroup v2 folder (/sys/fs/cgroup + the "0::" line of /proc/self/cgroup).
std::string cgroup_dir() {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return "";
}

long long threads_now() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Threads:", 0) == 0) return std::atoll(line.c_str() + 8);
  return 1;
}
#endif

Limit compute() {
  Limit l;
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) cpus = CPU_COUNT(&set);
#endif
  long long value = std::clamp<long long>(static_cast<long long>(cpus) * kPerCpu, kFloor, kCeiling);
  std::ostringstream why;
  why << cpus << (cpus == 1 ? " CPU" : " CPUs") << " x " << kPerCpu << ", at least " << kFloor
      << ", at most " << kCeiling;
#if defined(__linux__)
  const std::string dir = cgroup_dir();
  if (!dir.empty()) {
    const long long max = read_number(dir + "/pids.max"), cur = read_number(dir + "/pids.current");
    if (max > 0 && cur >= 0) {
      const long long half = std::max<long long>(1, (max - cur) / 2);
      if (half < value) {
        value = half;
        why << "; half of the " << (max - cur) << " threads the cgroup's pids.max still allows";
      }
    }
  }
  rlimit r{};
  if (getrlimit(RLIMIT_NPROC, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
    const long long left = static_cast<long long>(r.rlim_cur) - threads_now();
    const long long half = std::max<long long>(1, left / 2);
    if (half < value) {
      value = half;
      why << "; half of the threads RLIMIT_NPROC still allows";
    }
  }
#endif
  l.value = static_cast<int>(value);
  l.reason = why.str();
  return l;
}

#if defined(__linux__)
// The cgroup CPU quota of this process in CPUs (quota / period), or 0 when unlimited.
double cgroup_cpu_quota(std::string* where) {
  const std::string dir = cgroup_dir();
  if (!dir.empty()) {  // v2: "max 100000" or "150000 100000"
    std::ifstream f(dir + "/cpu.max");
    std::string quota;
    long long period = 0;
    if (f >> quota >> period) {
      if (quota == "max" || period <= 0) return 0;
      *where = dir + "/cpu.max";
      return static_cast<double>(std::atoll(quota.c_str())) / static_cast<double>(period);
    }
  }
  std::ifstream cg("/proc/self/cgroup");  // v1: the "cpu" controller's folder
  std::string line;
  while (std::getline(cg, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string ctrls = "," + line.substr(a + 1, b - a - 1) + ",";
    if (ctrls.find(",cpu,") == std::string::npos) continue;
    for (const std::string root : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
      const std::string d = root + line.substr(b + 1);
      const long long quota = read_number(d + "/cpu.cfs_quota_us");  // -1 reads as -1: none
      const long long period = read_number(d + "/cpu.cfs_period_us");
      if (quota > 0 && period > 0) {
        *where = d + "/cpu.cfs_quota_us";
        return static_cast<double>(quota) / static_cast<double>(period);
      }
    }
  }
  return 0;
}
#endif

Limit compute_cpus() {
  Limit l;
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::ostringstream why;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) cpus = CPU_COUNT(&set);
  why << "affinity " << cpus << (cpus == 1 ? " CPU" : " CPUs");
  std::string where;
  const double quota = cgroup_cpu_quota(&where);
  if (quota > 0) {
    const int q = std::max(1, static_cast<int>(quota + 0.999));
    why << "; cgroup CPU quota " << quota << " (" << where << ")";
    cpus = std::min(cpus, q);
  } else {
    why << "; no cgroup CPU quota";
  }
#else
  why << "hardware concurrency " << cpus;
#endif
  l.value = cpus;
  l.reason = why.str();
  return l;
}

const Limit& cpus_limit() {
  static const Limit l = compute_cpus();
  return l;
}

const Limit& limit() {
  static const Limit l = compute();
  return l;
}

}  // namespace

int max_host_threads() { return limit().value; }

int available_cpus() { return cpus_limit().value; }

std::string available_cpus_reason() {
  return std::to_string(cpus_limit().value) + " (" + cpus_limit().reason + ")";
}

int clamp_host_threads(long long requested) {
  if (requested <= 0) return 0;
  return static_cast<int>(std::min<long long>(requested, limit().value));
}

std::string host_threads_reason() { return std::to_string(limit().value) + " (" + limit().reason + ")"; }

}  // namespace xpuruntime
