// Run-time compilation of CUDA C++ source for the current device (the fused
// elementwise chains use it): NVRTC compiles to a cubin for the device's exact
// architecture, the runtime's library API loads it (cudaLibraryLoadData; no
// driver-API linkage, so the plugin still loads where libcuda is absent), and the
// cubin is cached on disk, keyed by SHA-256 of (source, options, GPU architecture,
// NVRTC version), under $XRT_CACHE_DIR/nvrtc or ~/.cache/xpuruntime/nvrtc.
//
// NVRTC itself is loaded with dlopen on first use: a machine without it loads the
// plugin and gets BackendUnavailableError only when it compiles. Kernels in the
// source must be declared extern "C" (their names are looked up unmangled, also
// from a cached cubin). Thread-safe: compile() may run concurrently (the cache is
// written through a temporary file and an atomic rename); a module is immutable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "xpuruntime/error.h"

namespace xpuruntime::cuda_ops {

// NVRTC rejected the source: the message names the program and carries the
// compiler's log, which log() also returns verbatim.
class NvrtcCompileError : public CudaError {
 public:
  NvrtcCompileError(const std::string& message, std::string log)
      : CudaError(message), log_(std::move(log)) {}
  const std::string& log() const { return log_; }

 private:
  std::string log_;
};

struct LaunchDims {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  std::size_t shared_bytes = 0;
};

class NvrtcModule {
 public:
  // Compiles (or loads from the disk cache) `source` for the current device.
  // `name` labels the program in errors and logs; `options` are NVRTC options
  // (the architecture option is added here); `kernels` are the extern "C" names
  // to resolve. Throws NvrtcCompileError, BackendUnavailableError (no NVRTC) or
  // CudaError (loading failed).
  static std::shared_ptr<const NvrtcModule> compile(const std::string& name,
                                                    const std::string& source,
                                                    const std::vector<std::string>& options,
                                                    const std::vector<std::string>& kernels);
  ~NvrtcModule();
  NvrtcModule(const NvrtcModule&) = delete;
  NvrtcModule& operator=(const NvrtcModule&) = delete;

  // Launches kernel `kernel` on `stream` (a cudaStream_t); args as for
  // cudaLaunchKernel (one pointer per kernel parameter).
  void launch(const std::string& kernel, const LaunchDims& dims, void** args, void* stream) const;

  bool from_cache() const { return from_cache_; }          // loaded without compiling
  const std::string& cache_key() const { return key_; }    // 64 hex digits
  const std::string& cache_path() const { return path_; }  // "" when the cache is not writable
  const std::string& arch() const { return arch_; }        // "sm_90"

 private:
  NvrtcModule() = default;
  void* library_ = nullptr;               // cudaLibrary_t
  std::map<std::string, void*> kernels_;  // name -> cudaKernel_t
  bool from_cache_ = false;
  std::string key_, path_, arch_;
};

// The cache folder: $XRT_CACHE_DIR/nvrtc, else $HOME/.cache/xpuruntime/nvrtc.
std::string nvrtc_cache_dir();

}  // namespace xpuruntime::cuda_ops
