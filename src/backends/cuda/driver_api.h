// The CUDA driver API and NVRTC, loaded at run time with dlopen so that one build of the library
// runs with and without a GPU (and without the toolkit). Only the entry points the backend uses are
// declared, with their C ABI types written out here; nothing includes cuda.h or nvrtc.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace palladium::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
struct CUgraph_st;
struct CUgraphExec_st;
struct CUgraphNode_st;
using CUgraph = CUgraph_st*;
using CUgraphExec = CUgraphExec_st*;
using CUgraphNode = CUgraphNode_st*;

// CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h, CUDA 12): a kernel node's launch. The v1 entry points read
// the same leading fields, so one struct serves both.
struct KernelNodeParams {
  CUfunction func = nullptr;
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1, block_y = 1, block_z = 1;
  unsigned shared_bytes = 0;
  void** kernel_params = nullptr;
  void** extra = nullptr;
  void* kern = nullptr;  // CUkernel: unused (func is given)
  CUcontext ctx = nullptr;
};

// CUlaunchConfig (cuda.h, CUDA 12) without launch attributes: what cuOccupancyMaxActiveClusters
// reads for a kernel whose cluster shape is compiled in (__cluster_dims__).
struct LaunchConfig {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1, block_y = 1, block_z = 1;
  unsigned shared_bytes = 0;
  CUstream stream = nullptr;
  void* attrs = nullptr;
  unsigned num_attrs = 0;
};

// Attribute numbers from the driver API's enums (stable across CUDA versions).
inline constexpr int kAttrMaxGridDimX = 5;
inline constexpr int kAttrMaxGridDimY = 6;
inline constexpr int kAttrMultiprocessorCount = 16;
inline constexpr int kAttrComputeCapabilityMajor = 75;
inline constexpr int kAttrComputeCapabilityMinor = 76;
inline constexpr int kAttrMaxSharedMemoryPerBlockOptin = 97;
inline constexpr int kFuncAttrMaxDynamicSharedSizeBytes = 8;
inline constexpr unsigned kStreamNonBlocking = 1;    // CU_STREAM_NON_BLOCKING: no implicit sync with stream 0
inline constexpr unsigned kEventDisableTiming = 2;   // CU_EVENT_DISABLE_TIMING: the cheapest event for ordering
inline constexpr CUresult kErrorNotReady = 600;      // CUDA_ERROR_NOT_READY from cuStreamQuery / cuEventQuery

struct DriverApi {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyPeerAsync)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  // CUDA graphs (optional: without them jitted programs launch kernel by kernel).
  CUresult (*cuGraphCreate)(CUgraph*, unsigned);
  CUresult (*cuGraphAddKernelNode)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const KernelNodeParams*);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode, const KernelNodeParams*);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  bool has_graphs = false;
  // Tensor maps for the TMA (optional: without it kernels copy their tiles with cp.async).
  // (map, data type, rank, address, dims, byte strides, box, element strides, interleave, swizzle,
  // L2 promotion, out-of-bounds fill); the enums are the driver's CUtensorMap* values.
  CUresult (*cuTensorMapEncodeTiled)(void*, int, unsigned, void*, const uint64_t*, const uint64_t*, const unsigned*,
                                     const unsigned*, int, int, int, int);
  // How many clusters of a kernel can be resident at once (optional: without it, as many as pairs
  // of multiprocessors).
  CUresult (*cuOccupancyMaxActiveClusters)(int*, CUfunction, const LaunchConfig*);
};

using nvrtcResult = int;
struct _nvrtcProgram;
using nvrtcProgram = _nvrtcProgram*;

struct NvrtcApi {
  const char* (*nvrtcGetErrorString)(nvrtcResult);
  nvrtcResult (*nvrtcVersion)(int*, int*);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                    const char* const*);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*);
  int major = 0, minor = 0;  // the library's version
};

// The loaded driver, or nullptr; `why` (if given) receives the reason it is missing. Loaded once.
const DriverApi* driver(std::string* why = nullptr);
// The loaded driver; throws Error("CUDA is unavailable: <why>") when there is none.
const DriverApi& require_driver();
// The loaded NVRTC, or nullptr with the reason.
const NvrtcApi* nvrtc(std::string* why = nullptr);

// "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"
std::string driver_error_text(CUresult r);
// Throws Error("<what>: <driver error text>") when r is not success.
void check_driver(CUresult r, const std::string& what);

}  // namespace palladium::cuda
