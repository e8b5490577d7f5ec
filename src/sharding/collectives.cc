// The collectives of a per-device program, run by the executor on the device's thread: each is
// written over the communicator's exchange (every member of the group sees every member's piece,
// in group order), which is what the in-process engine provides.
#include "sharding/collectives.h"

#include <cstring>

#include "palladium/device.h"
#include "palladium/numpy.h"

#include "sharding/communicator.h"
#include "sharding/sharding.h"

namespace palladium::sharding {

using program::Eqn;
using program::Prim;

namespace {

std::vector<int> axes_of(const Eqn& e) {
  std::vector<int> a;
  for (int64_t x : e.params.axes) a.push_back(static_cast<int>(x));
  return a;
}

template <class T> void combine_typed(T* acc, const T* x, int64_t n, const std::string& op) {
  if (op == "sum") for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
  else if (op == "max") for (int64_t i = 0; i < n; ++i) acc[i] = x[i] > acc[i] ? x[i] : acc[i];
  else if (op == "min") for (int64_t i = 0; i < n; ++i) acc[i] = x[i] < acc[i] ? x[i] : acc[i];
  else throw InternalError("collective reduction '" + op + "' is unknown");
}

// The pieces combined elementwise in group order (the same order on every device, so replicas
// stay bit-identical); narrow floats accumulate in float64 and round once.
Array reduce_pieces(const std::vector<Array>& pieces, const std::string& op) {
  const Array& first = pieces.at(0);
  const int64_t n = first.size();
  if (first.dtype() == DType::float32 || first.dtype() == DType::float64 || first.dtype() == DType::int32 ||
      first.dtype() == DType::int64) {
    Array acc = to_host(first).copy();
    for (size_t k = 1; k < pieces.size(); ++k) {
      const Array x = to_host(pieces[k]);
      switch (first.dtype()) {
        case DType::float32: combine_typed(acc.data_as<float>(), x.data_as<float>(), n, op); break;
        case DType::float64: combine_typed(acc.data_as<double>(), x.data_as<double>(), n, op); break;
        case DType::int32: combine_typed(acc.data_as<int32_t>(), x.data_as<int32_t>(), n, op); break;
        default: combine_typed(acc.data_as<int64_t>(), x.data_as<int64_t>(), n, op); break;
      }
    }
    return acc;
  }
  std::vector<double> acc = to_host(first).to_doubles();
  for (size_t k = 1; k < pieces.size(); ++k) {
    const std::vector<double> x = to_host(pieces[k]).to_doubles();
    combine_typed(acc.data(), x.data(), n, op);
  }
  Array out(first.shape(), first.dtype());
  for (int64_t i = 0; i < n; ++i) out.set(i, acc[static_cast<size_t>(i)]);
  return out;
}

// The collective done over the communicator's exchange, on host copies of the pieces.
std::vector<Array> over_exchange(const Eqn& e, const std::vector<Array>& ins, const SpmdContext* ctx,
                                 const std::vector<int64_t>& group, int64_t me) {
  const int64_t size = static_cast<int64_t>(group.size());
  const std::string what = program::prim_name(e.prim);
  const size_t axis = static_cast<size_t>(e.params.axis);
  switch (e.prim) {
    case Prim::axis_index: {
      Array out(Shape{}, DType::int32);
      out.data_as<int32_t>()[0] = static_cast<int32_t>(me);
      return {out};
    }
    case Prim::shard_slice: {
      if (!ins[0].is_sharded() && ins[0].device().kind == Device::cuda) {  // sliced where it lies
        std::vector<int64_t> start(ins[0].shape().size(), 0), limit = ins[0].shape();
        const int64_t block = limit[axis] / size;
        start[axis] = me * block;
        limit[axis] = start[axis] + block;
        return {lax::slice(ins[0], start, limit)};
      }
      return {take_block(to_host(ins[0]), axis, me, size)};
    }
    case Prim::all_gather: {
      std::vector<Array> all = ctx->comm->exchange(ctx->position, group, ins[0], what);
      if (!e.params.flag) {
        for (Array& a : all) {
          Shape s = a.shape();
          s.insert(s.begin() + static_cast<std::ptrdiff_t>(axis), 1);
          a = to_host(a).reshape(s);
        }
      }
      return {join_blocks(all, axis)};
    }
    case Prim::all_reduce:
      return {reduce_pieces(ctx->comm->exchange(ctx->position, group, ins[0], what), e.params.name)};
    case Prim::reduce_scatter: {
      const Array sum = reduce_pieces(ctx->comm->exchange(ctx->position, group, ins[0], what), e.params.name);
      Array mine = take_block(sum, axis, me, size);
      if (!e.params.flag) {
        Shape s = mine.shape();
        s.erase(s.begin() + static_cast<std::ptrdiff_t>(axis));
        mine = mine.reshape(s);
      }
      return {mine};
    }
    case Prim::all_to_all: {
      const std::vector<Array> all = ctx->comm->exchange(ctx->position, group, ins[0], what);
      std::vector<Array> mine;
      for (const Array& a : all) mine.push_back(take_block(to_host(a), axis, me, size));
      return {join_blocks(mine, static_cast<size_t>(e.params.count))};
    }
    case Prim::ppermute: {
      const std::vector<Array> all = ctx->comm->exchange(ctx->position, group, ins[0], what);
      for (size_t i = 0; i < e.params.lo.size(); ++i)
        if (e.params.hi[i] == me) return {to_host(all.at(static_cast<size_t>(e.params.lo[i]))).copy()};
      Array zeros(ins[0].shape(), ins[0].dtype());
      if (zeros.nbytes() > 0) std::memset(zeros.data(), 0, zeros.nbytes());
      return {zeros};
    }
    default:
      throw InternalError(what + " is not a collective");
  }
}

}  // namespace

std::vector<Array> run_collective(const Eqn& e, const std::vector<Array>& ins, std::function<void()>* join) {
  const SpmdContext* ctx = spmd_context();
  if (ctx == nullptr)
    throw Error(std::string(program::prim_name(e.prim)) +
                ": a collective runs only on the devices of a sharded_jit or shard_map call");
  const auto* mesh = static_cast<const Mesh*>(e.params.callee.get());
  int64_t me = 0;
  const std::vector<int64_t> group = group_of(*mesh, axes_of(e), ctx->position, &me);
  if (std::optional<std::vector<Array>> done = ctx->comm->native(e, ctx->position, group, me, ins, join))
    return std::move(*done);
  std::vector<Array> outs = over_exchange(e, ins, ctx, group, me);
  // Results stay on the device whose program this is (the exchange went through the host).
  const Device dev = mesh->devices()[static_cast<size_t>(ctx->position)];
  if (dev.kind == Device::cuda)
    for (Array& o : outs)
      if (!o.is_sharded() && o.device() != dev) o = to_device(o, dev);
  return outs;
}

}  // namespace palladium::sharding
