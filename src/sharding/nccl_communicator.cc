// The NCCL engine: the collectives of a per-device program on GPUs run as NCCL operations on the
// device buffers, on a stream of the engine's own ordered by events after the kernels that made
// them (no trip through the host). NCCL communicators are made once per group of devices and kept for the
// process; the group meets over the host engine (in-process or MPI) to share NCCL's unique id, so
// a device that fails before the first collective fails the others there (with its timeout) rather
// than leaving them waiting in NCCL's set-up. A failed device aborts the NCCL communicators its run
// used, which ends the operations the other GPUs are waiting in.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <set>

#include "backends/cuda/device_runtime.h"
#include "backends/cuda/stream.h"
#include "palladium/device.h"
#include "palladium/numpy.h"
#include "palladium/stream.h"
#include "program/program.h"
#include "sharding/communicator.h"
#include "sharding/nccl_api.h"

namespace palladium::sharding {

using program::Eqn;
using program::Prim;

namespace {

// NCCL communicators of this process, per group (its devices' names in group order), one per
// member; made on first use and kept (making one costs milliseconds to seconds).
struct CommCache {
  std::mutex mu;
  std::map<std::string, std::vector<NcclComm>> comms;
};
CommCache& comm_cache() {
  static CommCache* c = new CommCache;  // never destroyed: NCCL may still hold them at exit
  return *c;
}

// The stream NCCL's operations run on, one per GPU, made once: a non-blocking stream of its own
// (never the legacy default stream, whose implicit synchronisation with other streams can stall
// NCCL's kernels), ordered after the program's stream before each operation and before the
// program's later work after it.
cuda::StreamRef collective_stream(int ordinal) {
  static std::mutex mu;
  static auto* streams = new std::map<int, Stream>;  // never destroyed: NCCL may use them at exit
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams->find(ordinal);
  if (it == streams->end()) it = streams->emplace(ordinal, new_stream(Device{Device::cuda, ordinal})).first;
  return cuda::stream_ref(it->second);
}

// NCCL's element type for a reduction of `t`; nullopt where NCCL has none (int16, bool).
std::optional<NcclType> reduction_type(DType t) {
  switch (t) {
    case DType::int8: return NcclType::int8;
    case DType::uint8: return NcclType::uint8;
    case DType::int32: return NcclType::int32;
    case DType::uint32: return NcclType::uint32;
    case DType::int64: return NcclType::int64;
    case DType::float16: return NcclType::float16;
    case DType::bfloat16: return NcclType::bfloat16;
    case DType::float32: return NcclType::float32;
    case DType::float64: return NcclType::float64;
    default: return std::nullopt;
  }
}

std::optional<NcclOp> reduction_op(const std::string& name) {
  if (name == "sum") return NcclOp::sum;
  if (name == "max") return NcclOp::max;
  if (name == "min") return NcclOp::min;
  return std::nullopt;
}

// x with axis `from` moved to position `to`: a reshape where only extent-1 axes are crossed (the
// elements keep their order), else a transpose on the device.
Array move_axis(const Array& x, size_t from, size_t to) {
  if (from == to) return x;
  std::vector<int64_t> perm(x.shape().size());
  std::iota(perm.begin(), perm.end(), 0);
  perm.erase(perm.begin() + static_cast<std::ptrdiff_t>(from));
  perm.insert(perm.begin() + static_cast<std::ptrdiff_t>(to), static_cast<int64_t>(from));
  Shape moved;
  int64_t last = -1;
  bool in_order = true;
  for (int64_t p : perm) {
    const int64_t extent = x.shape()[static_cast<size_t>(p)];
    moved.push_back(extent);
    if (extent == 1) continue;
    in_order = in_order && p > last;
    last = p;
  }
  return in_order ? x.reshape(moved) : jnp::transpose(x, perm);
}

// Shape s with s[axis] multiplied by k (k < 0: divided by -k).
Shape scaled(Shape s, size_t axis, int64_t k) {
  s[axis] = k > 0 ? s[axis] * k : s[axis] / -k;
  return s;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const Mesh& mesh, std::unique_ptr<Communicator> host, const NcclApi& api)
      : mesh_(mesh), host_(std::move(host)), api_(api) {}

  std::vector<Array> exchange(int64_t position, const std::vector<int64_t>& group, const Array& mine,
                              const std::string& what) override {
    return host_->exchange(position, group, mine, what);
  }

  std::string name() const override { return "nccl (over " + host_->name() + ")"; }

  void abort(const std::string& why) override {
    host_->abort(why);
    std::lock_guard<std::mutex> used_lock(mu_);
    CommCache& cache = comm_cache();
    std::lock_guard<std::mutex> lock(cache.mu);
    for (const std::string& key : used_) {
      auto it = cache.comms.find(key);
      if (it == cache.comms.end()) continue;
      for (NcclComm c : it->second)
        if (c) api_.ncclCommAbort(c);
      cache.comms.erase(it);
    }
    used_.clear();
  }

  std::optional<std::vector<Array>> native(const Eqn& e, int64_t position, const std::vector<int64_t>& group,
                                           int64_t me, const std::vector<Array>& ins,
                                           std::function<void()>* join) override {
    const Device dev = mesh_.devices()[static_cast<size_t>(position)];
    if (dev.kind != Device::cuda || ins.empty() || ins[0].is_sharded()) return std::nullopt;
    const std::string what = program::prim_name(e.prim);
    Array x = ins[0].device() == dev ? ins[0] : to_device(ins[0], dev);
    const size_t axis = static_cast<size_t>(e.params.axis);
    const int64_t n = static_cast<int64_t>(group.size());
    switch (e.prim) {
      case Prim::all_reduce: {
        const std::optional<NcclType> t = reduction_type(x.dtype());
        const std::optional<NcclOp> op = reduction_op(e.params.name);
        if (!t || !op) return std::nullopt;
        // The result is returned as NCCL leaves it: the program's stream may wait for it later.
        Array out = run(position, group, me, dev, x, x.shape(), what, [&](NcclComm c, CudaStream s, Array& o) {
          return api_.ncclAllReduce(x.data(), o.data(), static_cast<size_t>(x.size()), *t, *op, c, s);
        }, false, join);
        return std::vector<Array>{out};
      }
      case Prim::all_gather: {
        // NCCL gathers the members' buffers one after another: (n, piece...), then the members' axis
        // goes where the gathered dimension is (joined with it unless the result stacks).
        Shape stacked = x.shape();
        stacked.insert(stacked.begin(), n);
        Array g = run(position, group, me, dev, x, stacked, what, [&](NcclComm c, CudaStream s, Array& o) {
          return api_.ncclAllGather(x.data(), o.data(), x.nbytes(), NcclType::uint8, c, s);
        });
        Array moved = move_axis(g, 0, axis);
        return std::vector<Array>{e.params.flag ? moved.reshape(scaled(x.shape(), axis, n)) : moved};
      }
      case Prim::reduce_scatter: {
        const std::optional<NcclType> t = reduction_type(x.dtype());
        const std::optional<NcclOp> op = reduction_op(e.params.name);
        if (!t || !op) return std::nullopt;
        // The scattered dimension first, so that member j's block is the j-th contiguous run.
        Array front = move_axis(x, axis, 0);
        const Shape block = scaled(front.shape(), 0, -n);
        Array mine = run(position, group, me, dev, front, block, what, [&](NcclComm c, CudaStream s, Array& o) {
          return api_.ncclReduceScatter(front.data(), o.data(), static_cast<size_t>(o.size()), *t, *op, c, s);
        });
        Array back = move_axis(mine, 0, axis);
        if (!e.params.flag) {
          Shape s = back.shape();
          s.erase(s.begin() + static_cast<std::ptrdiff_t>(axis));
          back = back.reshape(s);
        }
        return std::vector<Array>{back};
      }
      case Prim::all_to_all: {
        // Block j of the split dimension goes to member j; the blocks received, in member order, are
        // joined along the concatenated dimension.
        const size_t concat = static_cast<size_t>(e.params.count);
        Array front = move_axis(x, axis, 0);
        Shape received = front.shape();
        const int64_t per = x.shape()[axis] / n;
        received[0] = per;
        received.insert(received.begin(), n);
        const size_t block_bytes = x.nbytes() / static_cast<size_t>(n);
        Array r = run(position, group, me, dev, front, received, what, [&](NcclComm c, CudaStream s, Array& o) {
          ncclResult rc = api_.ncclGroupStart();
          for (int64_t j = 0; j < n && rc == 0; ++j) {
            rc = api_.ncclSend(static_cast<const char*>(front.data()) + static_cast<size_t>(j) * block_bytes,
                               block_bytes, NcclType::uint8, static_cast<int>(j), c, s);
            if (rc == 0)
              rc = api_.ncclRecv(static_cast<char*>(o.data()) + static_cast<size_t>(j) * block_bytes, block_bytes,
                                 NcclType::uint8, static_cast<int>(j), c, s);
          }
          const ncclResult end = api_.ncclGroupEnd();
          return rc != 0 ? rc : end;
        });
        // (member, block of the split dimension, rest...) -> the block back in place, then the
        // members joined along `concat`.
        Array blocks = move_axis(r, 1, axis + 1);
        Shape piece = scaled(x.shape(), axis, -n);
        return std::vector<Array>{move_axis(blocks, 0, concat).reshape(scaled(piece, concat, n))};
      }
      case Prim::ppermute: {
        int64_t from = -1;
        std::vector<int64_t> to;
        for (size_t i = 0; i < e.params.lo.size(); ++i) {
          if (e.params.lo[i] == me) to.push_back(e.params.hi[i]);
          if (e.params.hi[i] == me) from = e.params.lo[i];
        }
        // Where nobody sends here the result is zeros, as the other engines give (this device may
        // still send).
        Array out = run(position, group, me, dev, x, x.shape(), what, [&](NcclComm c, CudaStream s, Array& o) {
          ncclResult rc = api_.ncclGroupStart();
          for (int64_t t : to)
            if (rc == 0) rc = api_.ncclSend(x.data(), x.nbytes(), NcclType::uint8, static_cast<int>(t), c, s);
          if (rc == 0 && from >= 0)
            rc = api_.ncclRecv(o.data(), o.nbytes(), NcclType::uint8, static_cast<int>(from), c, s);
          const ncclResult end = api_.ncclGroupEnd();
          return rc != 0 ? rc : end;
        }, from < 0);
        return std::vector<Array>{out};
      }
      default:
        return std::nullopt;
    }
  }

 private:
  // Queues `op` (given the group's communicator, the stream and a fresh result of `shape`, zeroed
  // first if asked) on the engine's stream of the device, after the work that made `in`; `join`
  // as in Communicator::native.
  //
  // Every NCCL call is made inside a window that all members of the group enter together and
  // leave together, doing nothing else in it. Outside the window a device's host thread may block
  // in the driver: allocating, loading a kernel, copying from the host. Such calls can wait for
  // work already queued on a GPU, and with peer access between the GPUs not only on their own. A
  // GPU whose NCCL kernel is running waits for the kernels of the other members. If one member
  // could queue its part while another was still blocked short of queuing its own, both would wait
  // forever. So everything this collective needs is allocated before the window, and nobody leaves
  // until every member's part is queued: whatever is queued can then complete.
  template <class Op>
  Array run(int64_t position, const std::vector<int64_t>& group, int64_t me, Device dev, const Array& in,
            const Shape& shape, const std::string& what, Op op, bool zero_result = false,
            std::function<void()>* join = nullptr) {
    const NcclComm comm = comm_for(position, group, me, dev, what);
    const cuda::StreamRef compute = cuda::stream_ref(cuda::current_stream_for(what, dev.index));
    const cuda::StreamRef stream = collective_stream(dev.index);
    cuda::order_after(stream, compute, what);  // the operand is ready
    cuda::record_use(cuda::device_ptr(in), stream);
    Array out = cuda::device_array(shape, in.dtype(), dev.index, stream);
    if (zero_result)
      cuda::check_driver(cuda::require_driver().cuMemsetD8Async(cuda::device_ptr(out), 0, out.nbytes(),
                                                                static_cast<cuda::CUstream>(stream.handle)),
                         what + ": zeroing the result");
    const Array token(Shape{}, DType::uint8);
    host_->exchange(position, group, token, what + " (every device ready to queue it)");
    const ncclResult rc = op(comm, static_cast<CudaStream>(stream.handle), out);
    host_->exchange(position, group, token, what + " (every device has queued it)");
    check_nccl(rc, what + " on " + device_name(dev));
    // The program's later work sees the result once its stream waits for the engine's: at once,
    // or where the caller takes the join, when the result is first read.
    auto order = [compute, stream, ptr = cuda::device_ptr(out), what] {
      cuda::order_after(compute, stream, what);
      cuda::record_use(ptr, compute);
    };
    if (join) *join = order;
    else order();
    return out;
  }

  NcclComm comm_for(int64_t position, const std::vector<int64_t>& group, int64_t me, Device dev,
                    const std::string& what) {
    std::string key;
    for (int64_t g : group) key += device_name(mesh_.devices()[static_cast<size_t>(g)]) + " ";
    CommCache& cache = comm_cache();
    NcclComm known = nullptr;
    {
      std::lock_guard<std::mutex> lock(cache.mu);
      std::vector<NcclComm>& v = cache.comms[key];
      v.resize(group.size(), nullptr);
      known = v[static_cast<size_t>(me)];
    }
    remember(key);  // outside the cache's lock: abort takes this communicator's lock first
    if (known) return known;
    // The first collective of this group: its members meet over the host engine, the first
    // bringing NCCL's id, and join one NCCL communicator.
    NcclUniqueId id{};
    Array id_bytes(Shape{static_cast<int64_t>(sizeof id.internal)}, DType::uint8);
    if (me == 0) check_nccl(api_.ncclGetUniqueId(&id), what + ": making an NCCL id");
    std::memcpy(id_bytes.data(), id.internal, sizeof id.internal);
    const std::vector<Array> ids = host_->exchange(position, group, id_bytes, what + " (setting up NCCL)");
    std::memcpy(id.internal, to_host(ids.at(0)).data(), sizeof id.internal);
    cuda::make_current(dev.index);
    NcclComm c = nullptr;
    check_nccl(api_.ncclCommInitRank(&c, static_cast<int>(group.size()), id, static_cast<int>(me)),
               what + ": joining the NCCL communicator of " + key + "on " + device_name(dev));
    std::lock_guard<std::mutex> lock(cache.mu);
    std::vector<NcclComm>& v = cache.comms[key];
    v.resize(group.size(), nullptr);
    v[static_cast<size_t>(me)] = c;
    return c;
  }

  void remember(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    used_.insert(key);
  }

  Mesh mesh_;
  std::unique_ptr<Communicator> host_;
  const NcclApi& api_;
  std::mutex mu_;
  std::set<std::string> used_;  // the groups whose NCCL communicators this run used
};

}  // namespace

std::unique_ptr<Communicator> with_nccl(const Mesh& mesh, std::unique_ptr<Communicator> host) {
  for (const Device& d : mesh.devices())
    if (d.kind != Device::cuda) return host;
  // PALLADIUM_NCCL=0 stages the collectives through the host instead (for comparison, or where
  // NCCL misbehaves).
  const char* env = std::getenv("PALLADIUM_NCCL");
  if (env && std::string(env) == "0") return host;
  const NcclApi* api = nccl();
  if (!api) return host;
  return std::make_unique<NcclCommunicator>(mesh, std::move(host), *api);
}

}  // namespace palladium::sharding
