// The allocator benchmark's reference loop for torch's CUDA caching allocator,
// compiled on the benchmark machine with torch.utils.cpp_extension.load (so it
// builds against the installed torch) and run over the same alloc/free sequence
// as our loops in _core.memory._bench_alloc_sequence: step i frees slot slots[i]
// when live, then allocates sizes[i] into it; each pass ends by freeing the live
// slots. Only the benchmark uses it; xpuruntime never links torch.
#include <c10/cuda/CUDACachingAllocator.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace {

std::vector<double> bench(const std::vector<int64_t>& sizes, const std::vector<int32_t>& slots,
                          int num_slots, int passes) {
  if (sizes.size() != slots.size() || num_slots <= 0) throw std::invalid_argument("bad sequence");
  std::vector<double> seconds;
  for (int p = 0; p < passes; ++p) {
    std::vector<void*> live(static_cast<std::size_t>(num_slots), nullptr);
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      void*& slot = live[static_cast<std::size_t>(slots[i])];
      if (slot != nullptr) c10::cuda::CUDACachingAllocator::raw_delete(slot);
      slot = c10::cuda::CUDACachingAllocator::raw_alloc(static_cast<std::size_t>(sizes[i]));
    }
    for (void*& ptr : live) {
      if (ptr != nullptr) c10::cuda::CUDACachingAllocator::raw_delete(ptr);
    }
    const auto t1 = std::chrono::steady_clock::now();
    seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  return seconds;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("bench", &bench, pybind11::arg("sizes"), pybind11::arg("slots"),
        pybind11::arg("num_slots"), pybind11::arg("passes"),
        pybind11::call_guard<pybind11::gil_scoped_release>());
}
