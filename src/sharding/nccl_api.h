// NCCL, loaded at run time with dlopen (as the CUDA driver is) so that one build of the library runs
// with and without it. Only the entry points the GPU engine uses are declared, with their C ABI
// types written out here; nothing includes nccl.h.
#pragma once
#include <cstddef>
#include <string>

namespace palladium::sharding {

using ncclResult = int;
struct NcclCommOpaque;
using NcclComm = NcclCommOpaque*;
struct NcclUniqueId {
  char internal[128];  // NCCL_UNIQUE_ID_BYTES
};
using CudaStream = void*;  // cudaStream_t; nullptr is the legacy default stream

// ncclDataType_t and ncclRedOp_t values (stable across NCCL 2.x).
enum class NcclType : int { int8 = 0, uint8 = 1, int32 = 2, uint32 = 3, int64 = 4, uint64 = 5, float16 = 6,
                            float32 = 7, float64 = 8, bfloat16 = 9 };
enum class NcclOp : int { sum = 0, prod = 1, max = 2, min = 3 };

struct NcclApi {
  ncclResult (*ncclGetVersion)(int*);
  ncclResult (*ncclGetUniqueId)(NcclUniqueId*);
  ncclResult (*ncclCommInitRank)(NcclComm*, int, NcclUniqueId, int);
  ncclResult (*ncclCommInitAll)(NcclComm*, int, const int*);
  ncclResult (*ncclCommDestroy)(NcclComm);
  ncclResult (*ncclCommAbort)(NcclComm);
  const char* (*ncclGetErrorString)(ncclResult);
  ncclResult (*ncclAllReduce)(const void*, void*, size_t, NcclType, NcclOp, NcclComm, CudaStream);
  ncclResult (*ncclAllGather)(const void*, void*, size_t, NcclType, NcclComm, CudaStream);
  ncclResult (*ncclReduceScatter)(const void*, void*, size_t, NcclType, NcclOp, NcclComm, CudaStream);
  ncclResult (*ncclSend)(const void*, size_t, NcclType, int, NcclComm, CudaStream);
  ncclResult (*ncclRecv)(void*, size_t, NcclType, int, NcclComm, CudaStream);
  ncclResult (*ncclGroupStart)();
  ncclResult (*ncclGroupEnd)();
  int version = 0;  // e.g. 22703 for 2.27.3
};

// The loaded NCCL, or nullptr; `why` (if given) receives the reason it is missing. Loaded once, from
// PALLADIUM_NCCL_LIBRARY if set, else libnccl.so.2 on the loader's path.
const NcclApi* nccl(std::string* why = nullptr);
// Throws Error("<what>: NCCL failed: <its message>") when r is not success.
void check_nccl(ncclResult r, const std::string& what);

}  // namespace palladium::sharding
