#include "backends/cuda/nvrtc_compiler.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "backends/common/disk_cache.h"
#include "backends/common/embedded.h"
#include "backends/common/source_context.h"
#include "backends/cuda/driver_api.h"
#include "palladium/error.h"

namespace palladium::cuda {
namespace {

// Bumped whenever generated code or its device headers change meaning, so old cubins miss.
constexpr const char* kCodegenVersion = "cuda-codegen-3";

std::string nvrtc_text(const NvrtcApi& n, nvrtcResult r) {
  const char* s = n.nvrtcGetErrorString(r);
  return s ? s : "NVRTC error " + std::to_string(r);
}

struct Program {
  const NvrtcApi& n;
  nvrtcProgram prog = nullptr;
  ~Program() {
    if (prog) n.nvrtcDestroyProgram(&prog);
  }
};

std::string log_of(const NvrtcApi& n, nvrtcProgram p) {
  size_t size = 0;
  n.nvrtcGetProgramLogSize(p, &size);
  std::string log(size, '\0');
  if (size) n.nvrtcGetProgramLog(p, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// One NVRTC compile of `source` for `arch` ("sm_90a" -> cubin, "compute_90a" -> PTX).
std::string run_nvrtc(const NvrtcApi& n, const GeneratedKernel& g, const std::string& kernel_name,
                      const std::string& arch, bool ptx) {
  std::vector<const char*> header_sources, header_names;
  for (const auto& [name, text] : backend::embedded_headers()) {
    if (name.rfind("cuda/", 0) != 0) continue;
    header_names.push_back(name.c_str());
    header_sources.push_back(text.c_str());
  }
  Program p{n};
  const std::string file = kernel_name + ".cu";
  nvrtcResult r = n.nvrtcCreateProgram(&p.prog, g.source.c_str(), file.c_str(), static_cast<int>(header_names.size()),
                                       header_sources.data(), header_names.data());
  if (r != 0) throw Error("pallas_call '" + kernel_name + "': nvrtcCreateProgram failed: " + nvrtc_text(n, r));
  const std::string arch_opt = "--gpu-architecture=" + arch;
  // Unused-variable remarks are expected in generated code; keep the log to what matters.
  std::vector<const char*> opts{arch_opt.c_str(), "-std=c++17", "--restrict", "-default-device", "-diag-suppress=177,550"};
  // PALLADIUM_CUDA_PTXAS_VERBOSE=1 prints ptxas's register and spill report of every kernel.
  const char* verbose = std::getenv("PALLADIUM_CUDA_PTXAS_VERBOSE");
  const bool report = verbose && *verbose && std::string(verbose) != "0" && !ptx;
  if (report) opts.push_back("--ptxas-options=-v");
  r = n.nvrtcCompileProgram(p.prog, static_cast<int>(opts.size()), opts.data());
  if (r == 0 && report) std::fprintf(stderr, "[palladium cuda] %s:\n%s\n", kernel_name.c_str(), log_of(n, p.prog).c_str());
  if (r != 0) {
    const std::string log = log_of(n, p.prog);
    const int line = backend::first_error_line(log);
    std::string msg = "pallas_call '" + kernel_name + "': NVRTC could not compile the generated CUDA for " + arch +
                      ":\n" + log;
    if (line > 0) msg += "\ngenerated source around line " + std::to_string(line) + ":\n" + backend::source_excerpt(g.source, line);
    throw Error(msg);
  }
  size_t size = 0;
  std::string out;
  if (ptx) {
    n.nvrtcGetPTXSize(p.prog, &size);
    out.resize(size);
    n.nvrtcGetPTX(p.prog, out.data());
  } else {
    r = n.nvrtcGetCUBINSize(p.prog, &size);
    if (r != 0) throw Error("pallas_call '" + kernel_name + "': NVRTC produced no cubin: " + nvrtc_text(n, r));
    out.resize(size);
    n.nvrtcGetCUBIN(p.prog, out.data());
  }
  return out;
}

}  // namespace

std::string nvrtc_version() {
  const NvrtcApi* n = nvrtc();
  return n ? std::to_string(n->major) + "." + std::to_string(n->minor) : "";
}

std::string nvrtc_unavailable_reason() {
  std::string why;
  nvrtc(&why);
  return why;
}

CompileResult compile_to_cubin(const GeneratedKernel& g, const std::string& kernel_name, const Target& target,
                               bool use_cache, bool want_ptx) {
  std::string why;
  const NvrtcApi* n = nvrtc(&why);
  if (!n) throw Error("pallas_call '" + kernel_name + "': " + why);
  CompileResult out;
  // The key: codegen version, library version, NVRTC version, architecture and source (which
  // names the device headers it includes; their text joins too).
  std::string key = std::string(kCodegenVersion) + "|" + PALLADIUM_VERSION + "|nvrtc " + nvrtc_version() + "|" +
                    target.arch_flag() + "|" + g.source;
  for (const auto& [name, text] : backend::embedded_headers())
    if (name.rfind("cuda/", 0) == 0) key += "|" + name + "\n" + text;
  const backend::DiskCache cache("cuda");  // per compile: PALLADIUM_CACHE_DIR is read each time
  if (use_cache && !want_ptx && cache.enabled()) {
    if (std::optional<std::string> hit = cache.load(key)) {
      out.cubin = std::move(*hit);
      out.from_cache = true;
      return out;
    }
  }
  out.cubin = run_nvrtc(*n, g, kernel_name, target.arch_flag(), false);
  if (want_ptx) {
    std::string virt = target.arch_flag();
    virt.replace(0, 2, "compute");
    out.ptx = run_nvrtc(*n, g, kernel_name, virt, true);
  }
  if (use_cache && cache.enabled()) cache.store(key, out.cubin);
  return out;
}

}  // namespace palladium::cuda
