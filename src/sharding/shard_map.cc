// shard_map: f traced once on the local shapes of its pieces, with the named mesh axes bound so
// that psum, all_gather, psum_scatter, ppermute and axis_index bind collectives over them; the
// program runs on every device of the mesh and the results' pieces form global Arrays by out_specs.
#include <map>
#include <mutex>
#include <set>

#include "palladium/numpy.h"
#include "program/trace.h"
#include "sharding/sharding.h"
#include "transforms/transforms.h"

namespace palladium {

namespace sharding {
namespace {

thread_local const std::shared_ptr<const Mesh>* t_mesh = nullptr;  // the mesh of the shard_map being traced

struct MeshScope {
  explicit MeshScope(const std::shared_ptr<const Mesh>* m) : saved(t_mesh) { t_mesh = m; }
  ~MeshScope() { t_mesh = saved; }
  const std::shared_ptr<const Mesh>* saved;
};

const std::shared_ptr<const Mesh>& bound_mesh(const char* what, const AxisNames& axes) {
  std::string names;
  for (const std::string& n : axes.names) names += (names.empty() ? "'" : ", '") + n + "'";
  if (t_mesh == nullptr || program::Trace::current() == nullptr)
    throw Error(std::string(what) + ": called outside shard_map (mesh axes " + names +
                " are bound only inside a function that shard_map runs)");
  return *t_mesh;
}

program::Params collective_params(const char* what, const AxisNames& axes) {
  const std::shared_ptr<const Mesh>& mesh = bound_mesh(what, axes);
  PL_CHECK(!axes.names.empty(), what, ": needs at least one mesh axis");
  program::Params q;
  q.callee = mesh;
  std::set<int64_t> seen;
  for (const std::string& n : axes.names) {
    const int a = mesh->axis(n, what);
    PL_CHECK(seen.insert(a).second, what, ": mesh axis '", n, "' is named twice");
    q.axes.push_back(a);
  }
  return q;
}

int64_t group_size(const program::Params& q) {
  const auto* mesh = static_cast<const Mesh*>(q.callee.get());
  int64_t n = 1;
  for (int64_t a : q.axes) n *= mesh->shape()[static_cast<size_t>(a)];
  return n;
}

Array reduce(const char* what, const Array& x, const AxisNames& axes, const char* op) {
  program::Params q = collective_params(what, axes);
  q.name = op;
  return program::bind1(program::Prim::all_reduce, std::move(q), {x});
}

int64_t normalized_axis(const char* what, int64_t axis, int64_t rank) {
  PL_CHECK(axis >= -rank && axis < rank, what, ": axis ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

}  // namespace
}  // namespace sharding

namespace detail {

struct ShardMapCache {
  struct Entry {
    std::shared_ptr<const Mesh> mesh;
    std::vector<sharding::Sharding> in_sh;
    program::Program local;
    sharding::SpmdExecutable exe;
    std::shared_ptr<void> out_proto;
  };
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const Entry>> entries;
};

std::shared_ptr<ShardMapCache> make_shard_map_cache() { return std::make_shared<ShardMapCache>(); }

namespace {

// f traced on the local shapes of the arguments' pieces, optimised and compiled for every device.
std::shared_ptr<const ShardMapCache::Entry> trace_shard_map(const std::string& name, const FlatFn& f,
                                                             const Mesh& mesh_value,
                                                             const std::vector<PartitionSpec>& in_specs,
                                                             const std::vector<Array>& args,
                                                             const std::vector<PartitionSpec>& out_specs,
                                                             std::shared_ptr<void>& out_proto) {
  using sharding::Sharding;
  auto entry = std::make_shared<ShardMapCache::Entry>();
  entry->mesh = std::make_shared<const Mesh>(mesh_value);
  std::vector<program::Type> local_types;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string what = name + " argument " + std::to_string(i);
    PL_CHECK(!in_specs[i].is_counts(), what, ": ", in_specs[i].str(),
             " gives partition counts; shard_map takes mesh axis names, P(\"x\", None)");
    const Sharding s = sharding::from_named(NamedSharding(mesh_value, in_specs[i]), args[i].shape().size(), what);
    for (size_t d = 0; d < args[i].shape().size(); ++d)
      PL_CHECK(args[i].shape()[d] % s.pieces(d) == 0, what, ": dimension ", d, " of shape ",
               shape_str(args[i].shape()), " does not split into ", s.pieces(d), " pieces (", in_specs[i].str(), ")");
    entry->in_sh.push_back(s);
    local_types.push_back({s.local_shape(args[i].shape()), args[i].dtype()});
  }
  program::Traced traced = [&] {
    sharding::MeshScope scope(&entry->mesh);
    return program::trace_flat(name, f, local_types, Device{});
  }();
  PL_ASSERT(traced.captured.empty(), "a top-level shard_map trace captured outer values");
  entry->local = program::optimize(traced.program);
  PL_CHECK(out_specs.size() == entry->local.outputs.size(), name, ": ", out_specs.size(), " out_specs for ",
           entry->local.outputs.size(), " results");
  entry->exe = sharding::compile_spmd(entry->local, mesh_value);
  entry->out_proto = out_proto;
  return entry;
}

}  // namespace

std::vector<Array> shard_map_call(const std::string& name, const FlatFn& f, const Mesh& mesh_value,
                                  const std::vector<PartitionSpec>& in_specs, const std::vector<Array>& args,
                                  const std::vector<PartitionSpec>& out_specs, ShardMapCache& cache,
                                  const std::string& key, std::shared_ptr<void>& out_proto) {
  using sharding::Sharding;
  PL_CHECK(in_specs.size() == args.size(), name, ": ", in_specs.size(), " in_specs for ", args.size(),
           " arguments (one PartitionSpec per Array)");
  for (const Array& a : args)
    PL_CHECK(!a.is_tracer(), name, ": called inside another transformation (jit, grad, vmap); call it at the top "
                             "level (transformations go inside the function it maps)");
  std::string signature = key;
  for (const Array& a : args) signature += "|" + shape_str(a.shape()) + dtype_name(a.dtype());
  std::shared_ptr<const ShardMapCache::Entry> entry;
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    if (auto it = cache.entries.find(signature); it != cache.entries.end()) entry = it->second;
  }
  if (!entry) {
    entry = trace_shard_map(name, f, mesh_value, in_specs, args, out_specs, out_proto);
    std::lock_guard<std::mutex> lock(cache.mu);
    cache.entries[signature] = entry;
  }
  out_proto = entry->out_proto;
  const std::shared_ptr<const Mesh>& mesh = entry->mesh;
  const program::Program& local = entry->local;
  const std::vector<Sharding>& in_sh = entry->in_sh;
  const sharding::SpmdExecutable& exe = entry->exe;
  const int64_t n = mesh->size();
  std::vector<std::vector<Array>> per_device(static_cast<size_t>(n));
  for (size_t i = 0; i < args.size(); ++i) {
    std::vector<Array> pieces = sharding::split(args[i], in_sh[i]);
    for (int64_t p = 0; p < n; ++p) per_device[static_cast<size_t>(p)].push_back(pieces[static_cast<size_t>(p)]);
  }
  const auto outs = sharding::run_spmd(exe, mesh, per_device, name);
  std::vector<Array> results;
  for (size_t o = 0; o < out_specs.size(); ++o) {
    const program::Type& t = local.type(local.outputs[o]);
    const std::string what = name + " result " + std::to_string(o);
    PL_CHECK(!out_specs[o].is_counts(), what, ": ", out_specs[o].str(), " gives partition counts; use axis names");
    const Sharding s = sharding::from_named(NamedSharding(mesh_value, out_specs[o]), t.shape.size(), what);
    Shape global = t.shape;
    for (size_t d = 0; d < global.size(); ++d) global[d] *= s.pieces(d);
    std::vector<Array> pieces;
    for (int64_t p = 0; p < n; ++p)  // undefined where another process owns the device
      pieces.push_back(outs[static_cast<size_t>(p)].empty() ? Array() : outs[static_cast<size_t>(p)][o]);
    results.push_back(sharding::make_sharded(global, t.dtype, s, std::move(pieces)));
  }
  return results;
}

}  // namespace detail

Array psum(const Array& x, const AxisNames& axes) { return sharding::reduce("psum", x, axes, "sum"); }
Array pmax(const Array& x, const AxisNames& axes) { return sharding::reduce("pmax", x, axes, "max"); }
Array pmin(const Array& x, const AxisNames& axes) { return sharding::reduce("pmin", x, axes, "min"); }
Array pmean(const Array& x, const AxisNames& axes) {
  const int64_t n = sharding::group_size(sharding::collective_params("pmean", axes));
  return sharding::reduce("pmean", x, axes, "sum") / static_cast<double>(n);
}

Array all_gather(const Array& x, const AxisNames& axes, int64_t axis, bool tiled) {
  program::Params q = sharding::collective_params("all_gather", axes);
  q.axis = sharding::normalized_axis("all_gather", axis, x.ndim() + (tiled ? 0 : 1));
  q.flag = tiled;
  return program::bind1(program::Prim::all_gather, std::move(q), {x});
}

Array psum_scatter(const Array& x, const AxisNames& axes, int64_t axis, bool tiled) {
  program::Params q = sharding::collective_params("psum_scatter", axes);
  q.axis = sharding::normalized_axis("psum_scatter", axis, x.ndim());
  q.flag = tiled;
  q.name = "sum";
  return program::bind1(program::Prim::reduce_scatter, std::move(q), {x});
}

Array ppermute(const Array& x, const std::string& axis, const std::vector<std::pair<int64_t, int64_t>>& perm) {
  program::Params q = sharding::collective_params("ppermute", AxisNames(axis));
  const int64_t n = sharding::group_size(q);
  std::set<int64_t> sources, dests;
  for (auto [src, dst] : perm) {
    PL_CHECK(src >= 0 && src < n && dst >= 0 && dst < n, "ppermute: pair (", src, ", ", dst,
             ") is out of range for axis '", axis, "' of size ", n);
    PL_CHECK(sources.insert(src).second && dests.insert(dst).second, "ppermute: device ", src, " or ", dst,
             " appears twice in the permutation");
    q.lo.push_back(src);
    q.hi.push_back(dst);
  }
  q.step.assign(q.lo.size(), 1);
  return program::bind1(program::Prim::ppermute, std::move(q), {x});
}

Array axis_index(const AxisNames& axes) {
  return program::bind1(program::Prim::axis_index, sharding::collective_params("axis_index", axes), {});
}

}  // namespace palladium
