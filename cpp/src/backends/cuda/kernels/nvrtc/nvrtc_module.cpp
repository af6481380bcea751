#include "backends/cuda/kernels/nvrtc/nvrtc_module.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "backends/cuda/cuda_check.h"
#include "xpuruntime/policy.h"

namespace xpuruntime::cuda_ops {
namespace {

// The NVRTC entry points we use, resolved once with dlopen.
struct Nvrtc {
  std::string error;  // why NVRTC is unavailable ("" when loaded)
  void* handle = nullptr;
  decltype(&nvrtcVersion) version = nullptr;
  decltype(&nvrtcGetErrorString) error_string = nullptr;
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
  int major = 0, minor = 0;
};

const Nvrtc& nvrtc() {
  static const Nvrtc* lib = [] {
    auto* n = new Nvrtc();  // process lifetime: modules may outlive static teardown
    std::string tried;
    for (const char* so : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) {
      n->handle = dlopen(so, RTLD_NOW | RTLD_LOCAL);
      if (n->handle != nullptr) break;
      const char* e = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + so + ": " + (e ? e : "not found");
    }
    if (n->handle == nullptr) {
      n->error = "NVRTC could not be loaded (" + tried +
                 "); install the CUDA toolkit's NVRTC or put it on LD_LIBRARY_PATH";
      return n;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(n->handle, name));
      if (fn == nullptr && n->error.empty()) n->error = std::string("NVRTC lacks ") + name;
    };
    sym(n->version, "nvrtcVersion");
    sym(n->error_string, "nvrtcGetErrorString");
    sym(n->create, "nvrtcCreateProgram");
    sym(n->compile, "nvrtcCompileProgram");
    sym(n->log_size, "nvrtcGetProgramLogSize");
    sym(n->log, "nvrtcGetProgramLog");
    sym(n->cubin_size, "nvrtcGetCUBINSize");
    sym(n->cubin, "nvrtcGetCUBIN");
    sym(n->destroy, "nvrtcDestroyProgram");
    if (n->error.empty()) n->version(&n->major, &n->minor);
    return n;
  }();
  return *lib;
}

void check(const Nvrtc& n, nvrtcResult r, const char* call, const std::string& name) {
  if (r != NVRTC_SUCCESS)
    XRT_THROW(CudaError, call, " failed for program '", name, "': ", n.error_string(r));
}

std::string current_arch() {
  int dev = 0, major = 0, minor = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&dev));
  XRT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  XRT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return "sm_" + std::to_string(major * 10 + minor);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return {};
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Writes through a unique temporary file and renames it into place, so a
// concurrent reader sees either no file or a complete one. Returns false (the
// cache is skipped) when the folder is not writable.
bool write_atomically(const std::filesystem::path& p, const std::string& bytes) {
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  const std::filesystem::path tmp =
      p.string() + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return false;
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) return false;
  }
  std::filesystem::rename(tmp, p, ec);
  if (ec) std::filesystem::remove(tmp, ec);
  return !ec;
}

std::string compile_cubin(const Nvrtc& n, const std::string& name, const std::string& source,
                          const std::vector<std::string>& options) {
  nvrtcProgram prog = nullptr;
  check(n, n.create(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr),
        "nvrtcCreateProgram", name);
  struct Destroy {
    const Nvrtc& n;
    nvrtcProgram* p;
    ~Destroy() { n.destroy(p); }
  } destroy{n, &prog};
  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  const nvrtcResult r = n.compile(prog, static_cast<int>(opts.size()), opts.data());
  std::size_t log_size = 0;
  std::string log;
  if (n.log_size(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    n.log(prog, log.data());
    log.resize(log_size - 1);  // drop the terminating NUL
  }
  if (r != NVRTC_SUCCESS) {
    std::string joined;
    for (const std::string& o : options) joined += " " + o;
    throw NvrtcCompileError("NVRTC could not compile program '" + name + "' (" + n.error_string(r) +
                                "; options:" + joined + "); fix the generated source. Log:\n" + log,
                            log);
  }
  std::size_t size = 0;
  check(n, n.cubin_size(prog, &size), "nvrtcGetCUBINSize", name);
  std::string cubin(size, '\0');
  check(n, n.cubin(prog, cubin.data()), "nvrtcGetCUBIN", name);
  return cubin;
}

}  // namespace

std::string nvrtc_cache_dir() {
  if (const char* d = std::getenv("XRT_CACHE_DIR"); d != nullptr && *d != '\0')
    return (std::filesystem::path(d) / "nvrtc").string();
  const char* home = std::getenv("HOME");
  return (std::filesystem::path(home != nullptr && *home != '\0' ? home : "/tmp") / ".cache" /
          "xpuruntime" / "nvrtc")
      .string();
}

std::shared_ptr<const NvrtcModule> NvrtcModule::compile(const std::string& name,
                                                        const std::string& source,
                                                        const std::vector<std::string>& options,
                                                        const std::vector<std::string>& kernels) {
  const Nvrtc& n = nvrtc();
  XRT_CHECK(n.error.empty(), BackendUnavailableError, "compiling '", name, "': ", n.error);
  std::shared_ptr<NvrtcModule> m(new NvrtcModule());
  m->arch_ = current_arch();
  std::vector<std::string> opts = options;
  opts.push_back("--gpu-architecture=" + m->arch_);
  std::string key_text = source;
  for (const std::string& o : opts) key_text += '\0' + o;
  key_text +=
      '\0' + m->arch_ + '\0' + "nvrtc " + std::to_string(n.major) + "." + std::to_string(n.minor);
  m->key_ = sha256_hex(key_text);
  const std::filesystem::path path =
      std::filesystem::path(nvrtc_cache_dir()) / (m->key_ + ".cubin");

  std::string cubin = read_file(path);
  cudaLibrary_t lib = nullptr;
  if (!cubin.empty() && cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr,
                                            nullptr, 0) == cudaSuccess) {
    m->from_cache_ = true;
    m->path_ = path.string();
  } else {
    // No entry, or one the runtime rejects (truncated, foreign): compile afresh and
    // replace it.
    (void)cudaGetLastError();
    cubin = compile_cubin(n, name, source, opts);
    if (write_atomically(path, cubin)) m->path_ = path.string();
    XRT_CUDA_CHECK(
        cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  }
  m->library_ = lib;
  for (const std::string& k : kernels) {
    cudaKernel_t kernel = nullptr;
    const cudaError_t e = cudaLibraryGetKernel(&kernel, lib, k.c_str());
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      XRT_THROW(CudaError, "program '", name, "' has no kernel '", k,
                "' (declare it extern \"C\" __global__): ", cuda::cuda_error_text(e));
    }
    m->kernels_[k] = reinterpret_cast<void*>(kernel);
  }
  return m;
}

NvrtcModule::~NvrtcModule() {
  if (library_ != nullptr) (void)cudaLibraryUnload(static_cast<cudaLibrary_t>(library_));
}

void NvrtcModule::launch(const std::string& kernel, const LaunchDims& d, void** args,
                         void* stream) const {
  auto it = kernels_.find(kernel);
  XRT_CHECK(it != kernels_.end(), InvalidArgumentError, "NVRTC module ", key_.substr(0, 12),
            " has no kernel '", kernel, "' (list it when compiling)");
  XRT_CUDA_CHECK(cudaLaunchKernel(static_cast<const void*>(it->second),
                                  dim3(d.grid[0], d.grid[1], d.grid[2]),
                                  dim3(d.block[0], d.block[1], d.block[2]), args, d.shared_bytes,
                                  static_cast<cudaStream_t>(stream)));
}

}  // namespace xpuruntime::cuda_ops
