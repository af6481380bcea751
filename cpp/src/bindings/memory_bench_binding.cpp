// _core.memory._bench_alloc_sequence: runs a given alloc/free sequence in C++,
// through a fresh CachingAllocator ("caching") or straight through the device
// backend's raw_alloc/raw_free (cudaMalloc/cudaFree on CUDA: "raw"), so the
// benchmark (benchmarks/bench_runtime.py) can compare allocators without Python
// call overhead. The sequence comes from the caller so every allocator sees the
// same one. Private (leading underscore): a measurement tool, not an API.
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/memory.h"

namespace xpuruntime::bindings {
namespace {

struct BenchResult {
  std::vector<double> pass_seconds;  // one entry per pass over the sequence
  MemoryStats stats;                 // caching mode: the allocator's after all passes
};

// Step i frees whatever lives in slots[i] (if anything), then allocates sizes[i]
// into it; after the last step every live slot is freed, so each pass makes
// exactly sizes.size() allocations and as many frees.
template <typename Alloc, typename Free>
double run_pass(const std::vector<int64_t>& sizes, const std::vector<int32_t>& slots,
                int num_slots, Alloc&& alloc, Free&& release) {
  std::vector<void*> live(static_cast<std::size_t>(num_slots), nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    void*& slot = live[static_cast<std::size_t>(slots[i])];
    if (slot != nullptr) release(slot);
    slot = alloc(static_cast<std::size_t>(sizes[i]));
  }
  for (void*& p : live) {
    if (p != nullptr) release(p);
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

BenchResult bench_alloc_free(const std::vector<int64_t>& sizes, const std::vector<int32_t>& slots,
                             int num_slots, const std::string& mode, const std::string& device,
                             int passes) {
  XRT_CHECK(sizes.size() == slots.size(), InvalidArgumentError, "_bench_alloc_sequence: ",
            sizes.size(), " sizes but ", slots.size(), " slots; pass one slot per size");
  XRT_CHECK(num_slots > 0 && passes > 0, InvalidArgumentError,
            "_bench_alloc_sequence: num_slots and passes must be positive");
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    XRT_CHECK(slots[i] >= 0 && slots[i] < num_slots && sizes[i] >= 0, InvalidArgumentError,
              "_bench_alloc_sequence: step ", i, " has slot ", slots[i], " (of ", num_slots,
              ") and size ", sizes[i]);
  }
  const Device dev = Device::parse(device);
  DeviceManager::instance().check_device(dev);
  DeviceBackend& backend = DeviceManager::instance().backend(dev.kind);
  BenchResult result;
  if (mode == "caching") {
    CachingAllocator alloc(backend, dev);  // fresh: its first pass starts cold
    for (int p = 0; p < passes; ++p) {
      result.pass_seconds.push_back(run_pass(
          sizes, slots, num_slots, [&](std::size_t n) { return alloc.allocate(n); },
          [&](void* ptr) { alloc.free(ptr); }));
    }
    result.stats = alloc.stats();
  } else if (mode == "raw") {
    for (int p = 0; p < passes; ++p) {
      result.pass_seconds.push_back(run_pass(
          sizes, slots, num_slots,
          [&](std::size_t n) {
            void* ptr = backend.raw_alloc(dev.index, n);
            XRT_CHECK(ptr != nullptr || n == 0, OutOfMemoryError,
                      "_bench_alloc_sequence: raw_alloc of ",
                      n, " bytes on ", dev.str(), " failed; use fewer slots or smaller sizes");
            return ptr;
          },
          [&](void* ptr) { backend.raw_free(dev.index, ptr); }));
    }
  } else {
    XRT_THROW(InvalidArgumentError, "_bench_alloc_sequence: mode '", mode,
              "' is unknown; use 'caching' or 'raw'");
  }
  return result;
}

}  // namespace

void bind_memory_bench(py::module_& m) {
  py::module_ mem = py::hasattr(m, "memory") ? py::module_(m.attr("memory"))
                                              : m.def_submodule("memory", "MemoryManager bindings");
  mem.def(
      "_bench_alloc_sequence",
      [](const std::vector<int64_t>& sizes, const std::vector<int32_t>& slots, int num_slots,
         const std::string& mode, const std::string& device, int passes) {
        BenchResult r;
        {
          py::gil_scoped_release release;
          r = bench_alloc_free(sizes, slots, num_slots, mode, device, passes);
        }
        py::dict out;
        out["pass_seconds"] = r.pass_seconds;
        out["pairs_per_pass"] = sizes.size();
        if (mode == "caching") {
          out["num_cache_hits"] = r.stats.num_cache_hits;
          out["num_cache_misses"] = r.stats.num_cache_misses;
          out["num_device_allocs"] = r.stats.num_device_allocs;
          out["num_device_frees"] = r.stats.num_device_frees;
          out["peak_reserved_bytes"] = r.stats.peak_reserved_bytes;
        }
        return out;
      },
      py::arg("sizes"), py::arg("slots"), py::arg("num_slots"), py::arg("mode"),
      py::arg("device") = "cuda:0", py::arg("passes") = 2,
      "Time `passes` runs of an alloc/free sequence in C++ (mode 'caching': a fresh "
      "CachingAllocator; 'raw': the backend's raw_alloc/raw_free). Step i frees slot "
      "slots[i] if live, then allocates sizes[i] into it; the live slots are freed at the "
      "end of each pass. Returns per-pass seconds (and allocator stats for 'caching').");
}

}  // namespace xpuruntime::bindings
