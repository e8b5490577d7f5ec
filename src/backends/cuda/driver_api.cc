// dlopen of libcuda.so.1 and libnvrtc: each entry point is looked up by its versioned symbol name
// (the names cuda.h's macros expand to), so the library never links against CUDA.
#include "backends/cuda/driver_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "backends/common/dl_bind.h"
#include "palladium/error.h"

namespace palladium::cuda {
namespace {

using backend::bind;

struct LoadedDriver {
  DriverApi api{};
  std::string why;  // empty when usable
};

LoadedDriver load_driver() {
  LoadedDriver out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    out.why = "the CUDA driver library libcuda.so.1 could not be loaded (no NVIDIA driver on this machine)";
    return out;
  }
  DriverApi& a = out.api;
  std::string missing;
  bind(lib, a.cuInit, {"cuInit"}, missing);
  bind(lib, a.cuDeviceGetCount, {"cuDeviceGetCount"}, missing);
  bind(lib, a.cuDeviceGet, {"cuDeviceGet"}, missing);
  bind(lib, a.cuDeviceGetName, {"cuDeviceGetName"}, missing);
  bind(lib, a.cuDeviceGetAttribute, {"cuDeviceGetAttribute"}, missing);
  bind(lib, a.cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"}, missing);
  bind(lib, a.cuCtxSetCurrent, {"cuCtxSetCurrent"}, missing);
  bind(lib, a.cuCtxSynchronize, {"cuCtxSynchronize"}, missing);
  bind(lib, a.cuMemAlloc, {"cuMemAlloc_v2"}, missing);
  bind(lib, a.cuMemFree, {"cuMemFree_v2"}, missing);
  bind(lib, a.cuMemcpyDtoDAsync, {"cuMemcpyDtoDAsync_v2"}, missing);
  bind(lib, a.cuMemcpyHtoDAsync, {"cuMemcpyHtoDAsync_v2"}, missing);
  bind(lib, a.cuMemcpyDtoHAsync, {"cuMemcpyDtoHAsync_v2"}, missing);
  bind(lib, a.cuMemcpyPeerAsync, {"cuMemcpyPeerAsync"}, missing);
  bind(lib, a.cuMemsetD8Async, {"cuMemsetD8Async"}, missing);
  bind(lib, a.cuModuleLoadData, {"cuModuleLoadData"}, missing);
  bind(lib, a.cuModuleGetFunction, {"cuModuleGetFunction"}, missing);
  bind(lib, a.cuFuncSetAttribute, {"cuFuncSetAttribute"}, missing);
  bind(lib, a.cuOccupancyMaxActiveBlocksPerMultiprocessor, {"cuOccupancyMaxActiveBlocksPerMultiprocessor"}, missing);
  bind(lib, a.cuLaunchKernel, {"cuLaunchKernel"}, missing);
  bind(lib, a.cuStreamCreate, {"cuStreamCreate"}, missing);
  bind(lib, a.cuStreamDestroy, {"cuStreamDestroy_v2"}, missing);
  bind(lib, a.cuStreamSynchronize, {"cuStreamSynchronize"}, missing);
  bind(lib, a.cuStreamQuery, {"cuStreamQuery"}, missing);
  bind(lib, a.cuStreamWaitEvent, {"cuStreamWaitEvent"}, missing);
  bind(lib, a.cuEventCreate, {"cuEventCreate"}, missing);
  bind(lib, a.cuEventQuery, {"cuEventQuery"}, missing);
  bind(lib, a.cuEventDestroy, {"cuEventDestroy_v2", "cuEventDestroy"}, missing);
  bind(lib, a.cuEventRecord, {"cuEventRecord"}, missing);
  bind(lib, a.cuEventSynchronize, {"cuEventSynchronize"}, missing);
  bind(lib, a.cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"}, missing);
  bind(lib, a.cuGetErrorName, {"cuGetErrorName"}, missing);
  bind(lib, a.cuGetErrorString, {"cuGetErrorString"}, missing);
  if (!missing.empty()) {
    out.why = "the CUDA driver library lacks " + missing + " (driver too old)";
    return out;
  }
  std::string no_graphs;
  bind(lib, a.cuGraphCreate, {"cuGraphCreate"}, no_graphs);
  bind(lib, a.cuGraphAddKernelNode, {"cuGraphAddKernelNode_v2", "cuGraphAddKernelNode"}, no_graphs);
  bind(lib, a.cuGraphInstantiateWithFlags, {"cuGraphInstantiateWithFlags"}, no_graphs);
  bind(lib, a.cuGraphExecKernelNodeSetParams, {"cuGraphExecKernelNodeSetParams_v2", "cuGraphExecKernelNodeSetParams"}, no_graphs);
  bind(lib, a.cuGraphLaunch, {"cuGraphLaunch"}, no_graphs);
  bind(lib, a.cuGraphExecDestroy, {"cuGraphExecDestroy"}, no_graphs);
  bind(lib, a.cuGraphDestroy, {"cuGraphDestroy"}, no_graphs);
  a.has_graphs = no_graphs.empty();
  std::string no_tensor_maps;
  bind(lib, a.cuTensorMapEncodeTiled, {"cuTensorMapEncodeTiled"}, no_tensor_maps);
  if (!no_tensor_maps.empty()) a.cuTensorMapEncodeTiled = nullptr;
  std::string no_cluster_query;
  bind(lib, a.cuOccupancyMaxActiveClusters, {"cuOccupancyMaxActiveClusters"}, no_cluster_query);
  if (!no_cluster_query.empty()) a.cuOccupancyMaxActiveClusters = nullptr;
  if (CUresult r = a.cuInit(0); r != 0) {
    out.why = "cuInit failed: " + std::to_string(r) + " (no usable NVIDIA GPU)";
    return out;
  }
  int count = 0;
  if (a.cuDeviceGetCount(&count) != 0 || count == 0) out.why = "no CUDA device is visible";
  return out;
}

struct LoadedNvrtc {
  NvrtcApi api{};
  std::string why;
};

std::vector<std::string> nvrtc_candidates() {
  std::vector<std::string> names;
  if (const char* env = std::getenv("PALLADIUM_NVRTC"); env && *env) names.emplace_back(env);
  const char* sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"};
  for (const char* s : sonames) names.emplace_back(s);
  std::vector<std::string> dirs;
#ifdef PALLADIUM_CUDA_LIB_DIR
  dirs.emplace_back(PALLADIUM_CUDA_LIB_DIR);
#endif
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) dirs.push_back(std::string(home) + "/lib64");
  dirs.emplace_back("/usr/local/cuda/lib64");
  for (const std::string& d : dirs)
    for (const char* s : sonames) names.push_back(d + "/" + s);
  return names;
}

LoadedNvrtc load_nvrtc() {
  LoadedNvrtc out;
  void* lib = nullptr;
  for (const std::string& n : nvrtc_candidates())
    if ((lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
  if (!lib) {
    out.why = "NVRTC (libnvrtc.so) could not be loaded; install the CUDA toolkit or set PALLADIUM_NVRTC";
    return out;
  }
  NvrtcApi& a = out.api;
  std::string missing;
  bind(lib, a.nvrtcGetErrorString, {"nvrtcGetErrorString"}, missing);
  bind(lib, a.nvrtcVersion, {"nvrtcVersion"}, missing);
  bind(lib, a.nvrtcCreateProgram, {"nvrtcCreateProgram"}, missing);
  bind(lib, a.nvrtcDestroyProgram, {"nvrtcDestroyProgram"}, missing);
  bind(lib, a.nvrtcCompileProgram, {"nvrtcCompileProgram"}, missing);
  bind(lib, a.nvrtcGetPTXSize, {"nvrtcGetPTXSize"}, missing);
  bind(lib, a.nvrtcGetPTX, {"nvrtcGetPTX"}, missing);
  bind(lib, a.nvrtcGetCUBINSize, {"nvrtcGetCUBINSize"}, missing);
  bind(lib, a.nvrtcGetCUBIN, {"nvrtcGetCUBIN"}, missing);
  bind(lib, a.nvrtcGetProgramLogSize, {"nvrtcGetProgramLogSize"}, missing);
  bind(lib, a.nvrtcGetProgramLog, {"nvrtcGetProgramLog"}, missing);
  if (!missing.empty()) {
    out.why = "NVRTC lacks " + missing + " (a cubin-capable NVRTC, CUDA 11.2 or newer, is needed)";
    return out;
  }
  a.nvrtcVersion(&a.major, &a.minor);
  return out;
}

}  // namespace

const DriverApi* driver(std::string* why) {
  static const LoadedDriver loaded = load_driver();
  if (why) *why = loaded.why;
  return loaded.why.empty() ? &loaded.api : nullptr;
}

const DriverApi& require_driver() {
  std::string why;
  const DriverApi* d = driver(&why);
  if (!d) throw Error("CUDA is unavailable: " + why);
  return *d;
}

const NvrtcApi* nvrtc(std::string* why) {
  static const LoadedNvrtc loaded = load_nvrtc();
  if (why) *why = loaded.why;
  return loaded.why.empty() ? &loaded.api : nullptr;
}

std::string driver_error_text(CUresult r) {
  const DriverApi* d = driver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (d) {
    d->cuGetErrorName(r, &name);
    d->cuGetErrorString(r, &text);
  }
  return std::string(name ? name : "CUDA error " + std::to_string(r)) + (text ? std::string(": ") + text : "");
}

void check_driver(CUresult r, const std::string& what) {
  if (r != 0) throw Error(what + ": " + driver_error_text(r));
}

}  // namespace palladium::cuda
