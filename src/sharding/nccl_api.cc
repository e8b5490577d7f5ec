// dlopen of NCCL: the library never links against it, so builds and CI machines without the CUDA
// toolkit keep every other engine.
#include "sharding/nccl_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "backends/common/dl_bind.h"
#include "palladium/error.h"

namespace palladium::sharding {
namespace {

struct LoadedNccl {
  NcclApi api{};
  std::string why;  // empty when usable
};

using backend::bind;

LoadedNccl load() {
  LoadedNccl out;
  std::vector<std::string> names;
  const char* env = std::getenv("PALLADIUM_NCCL_LIBRARY");
  if (env && *env) names.emplace_back(env);
  else names = {"libnccl.so.2", "libnccl.so"};
  void* lib = nullptr;
  std::string tried;
  for (const std::string& n : names) {
    if ((lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    tried += (tried.empty() ? "" : ", ") + n;
  }
  if (!lib) {
    const char* e = dlerror();
    out.why = "NCCL could not be loaded (tried " + tried + (e ? std::string("; ") + e : std::string()) +
              "); set PALLADIUM_NCCL_LIBRARY to the path of libnccl.so.2";
    return out;
  }
  NcclApi& a = out.api;
  std::string missing;
  bind(lib, a.ncclGetVersion, {"ncclGetVersion"}, missing);
  bind(lib, a.ncclGetUniqueId, {"ncclGetUniqueId"}, missing);
  bind(lib, a.ncclCommInitRank, {"ncclCommInitRank"}, missing);
  bind(lib, a.ncclCommInitAll, {"ncclCommInitAll"}, missing);
  bind(lib, a.ncclCommDestroy, {"ncclCommDestroy"}, missing);
  bind(lib, a.ncclCommAbort, {"ncclCommAbort"}, missing);
  bind(lib, a.ncclGetErrorString, {"ncclGetErrorString"}, missing);
  bind(lib, a.ncclAllReduce, {"ncclAllReduce"}, missing);
  bind(lib, a.ncclAllGather, {"ncclAllGather"}, missing);
  bind(lib, a.ncclReduceScatter, {"ncclReduceScatter"}, missing);
  bind(lib, a.ncclSend, {"ncclSend"}, missing);
  bind(lib, a.ncclRecv, {"ncclRecv"}, missing);
  bind(lib, a.ncclGroupStart, {"ncclGroupStart"}, missing);
  bind(lib, a.ncclGroupEnd, {"ncclGroupEnd"}, missing);
  if (!missing.empty()) {
    out.why = "the NCCL library lacks " + missing + " (NCCL 2.7 or newer is needed)";
    return out;
  }
  a.ncclGetVersion(&a.version);
  return out;
}

}  // namespace

const NcclApi* nccl(std::string* why) {
  static const LoadedNccl loaded = load();
  if (why) *why = loaded.why;
  return loaded.why.empty() ? &loaded.api : nullptr;
}

void check_nccl(ncclResult r, const std::string& what) {
  if (r == 0) return;
  const NcclApi* a = nccl();
  throw Error(what + ": NCCL failed: " + (a ? a->ncclGetErrorString(r) : "error " + std::to_string(r)));
}

}  // namespace palladium::sharding
