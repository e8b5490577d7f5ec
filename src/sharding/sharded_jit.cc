// The seed's sharded_jit: specs matched to the flat arguments and results, the seed's checks
// (partition counts agree, enough devices, ranks match, static_argnums in range), one mesh per call
// from the partition counts, then trace -> propagate -> partition -> compile, cached per signature,
// and the SPMD run over the pieces.
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "program/families.h"
#include "program/trace.h"
#include "sharding/distributed.h"
#include "sharding/sharding.h"
#include "transforms/transforms.h"

namespace palladium {

namespace detail {

struct ShardedJitState {
  Parts in_parts, out_parts;
  ShardedJitOptions options;
  std::mutex mu;
  struct Entry {
    program::Program traced;
    sharding::Partitioned parts;
    std::shared_ptr<const Mesh> mesh;
    sharding::SpmdExecutable exe;
    // local_in_parts / local_out_parts: how this process's chunk of an argument (of a result) is
    // cut over its devices, which are the mesh positions in `here`.
    std::vector<int64_t> here;
    std::vector<std::optional<sharding::Sharding>> local_in, local_out;
    std::vector<program::Type> local_out_types;
  };
  std::map<std::string, std::shared_ptr<Entry>> entries;
};

}  // namespace detail

namespace sharding {
namespace {

thread_local int t_sharded_traces = 0;  // sharded_jit traces open on this thread

struct TraceScope {
  TraceScope() { ++t_sharded_traces; }
  ~TraceScope() { --t_sharded_traces; }
};

// One Array's spec: partition counts (or None), or a NamedSharding.
struct Spec {
  std::optional<PartitionSpec> counts;
  std::optional<NamedSharding> named;
};

// The spec of every Array under `shape`, as `parts` gives them (a leaf covers a whole subtree).
void flatten_parts(const Parts& parts, const detail::TreeShape& shape, const std::string& what,
                   std::vector<Spec>& out) {
  if (!parts.is_list) {
    out.insert(out.end(), shape.leaves, Spec{parts.spec, parts.named});
    return;
  }
  if (shape.children.empty() && parts.children.size() == 1) return flatten_parts(parts.children[0], shape, what, out);
  if (parts.children.size() != shape.children.size())
    throw Error("sharded_jit: " + what + " " + parts.str() + " has " + std::to_string(parts.children.size()) +
                " entries for " + std::to_string(shape.children.size()) + " elements");
  for (size_t i = 0; i < parts.children.size(); ++i) flatten_parts(parts.children[i], shape.children[i], what, out);
}

struct Located {
  PartitionSpec spec;
  std::string where;  // "argument 0", "output 1", "with_sharding_constraint 2"
};

std::string names_of(const std::vector<Located>& specs) {
  std::string s;
  for (const Located& l : specs) s += (s.empty() ? "" : ", ") + l.spec.str() + " (" + l.where + ")";
  return s;
}

// The seed's rule: all non-replicated specs of a call agree on the number of partitions;
// replicated-only calls take num_partitions.
int64_t reconcile_partitions(const std::vector<Located>& specs, const ShardedJitOptions& o) {
  std::optional<int64_t> n = o.num_partitions;
  std::vector<Located> split;
  for (const Located& l : specs)
    if (!l.spec.replicated()) split.push_back(l);
  for (const Located& l : split)
    if (n && l.spec.num_partitions() != *n)
      throw Error("sharded_jit: the PartitionSpecs disagree on the number of partitions: " + names_of(split) +
                  (o.num_partitions ? ", num_partitions=" + std::to_string(*o.num_partitions) : std::string()));
    else n = l.spec.num_partitions();
  if (!n)
    throw Error("sharded_jit: every PartitionSpec is replicated (None), so the number of partitions is unknown; "
                "pass num_partitions");
  PL_CHECK(*n >= 1, "sharded_jit: num_partitions must be positive, got ", *n);
  return *n;
}

// The mesh of a call: its axes are the common refinement of the specs' running partition counts,
// so every spec's dimensions are runs of consecutive axes (PartitionSpec(2, 2) and (4, 1) on four
// devices: axes p0=2, p1=2; the first splits as (p0)(p1), the second as (p0 p1)()).
std::shared_ptr<const Mesh> counts_mesh(const std::vector<Located>& specs, std::vector<Device> devs) {
  const int64_t nparts = static_cast<int64_t>(devs.size());
  std::set<int64_t> bounds{nparts};
  for (const Located& l : specs) {
    int64_t prod = 1;
    for (int64_t c : l.spec.counts()) {
      prod *= c;
      if (c > 1) bounds.insert(prod);
    }
  }
  Shape sizes;
  std::vector<std::string> names;
  int64_t prev = 1;
  for (int64_t b : bounds) {
    if (b == 1) continue;
    if (b % prev != 0)
      throw Error("sharded_jit: the PartitionSpecs " + names_of(specs) + " cut the " + std::to_string(nparts) +
                  " devices in orders that do not nest (running products " + std::to_string(prev) + " and " +
                  std::to_string(b) + "); not supported");
    sizes.push_back(b / prev);
    names.push_back("p" + std::to_string(names.size()));
    prev = b;
  }
  if (sizes.empty()) sizes = {nparts}, names = {"p0"};
  return std::make_shared<const Mesh>(std::move(devs), std::move(sizes), std::move(names));
}

std::shared_ptr<const Mesh> call_mesh(const std::vector<Located>& specs, int64_t nparts) {
  std::vector<Device> all = devices();
  all.resize(static_cast<size_t>(nparts));
  return counts_mesh(specs, std::move(all));
}

Sharding counts_sharding(const std::optional<PartitionSpec>& spec, const program::Type& t, const std::shared_ptr<const Mesh>& mesh,
                         const std::string& where) {
  const size_t rank = t.shape.size();
  Sharding s = Sharding::replicated(mesh, rank);
  if (!spec || spec->replicated()) return s;
  std::vector<int64_t> cum;
  int64_t c = 1;
  for (int64_t n : mesh->shape()) cum.push_back(c *= n);
  int64_t start = 1;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t end = start * spec->counts()[d];
    for (size_t a = 0; a < cum.size(); ++a)
      if (cum[a] > start && cum[a] <= end) s.dims[d].push_back(static_cast<int>(a));
    if (t.shape[d] % spec->counts()[d] != 0)
      throw Error("sharded_jit: " + spec->str() + " of " + where + " splits dimension " + std::to_string(d) +
                  " of size " + std::to_string(t.shape[d]) + " (" + program::type_str(t) + ") into " +
                  std::to_string(spec->counts()[d]) + " pieces, which does not divide it");
    start = end;
  }
  return s;
}

void check_spec(const std::optional<PartitionSpec>& spec, const program::Type& t, const std::string& where) {
  if (!spec) return;
  if (spec->is_named())
    throw Error("sharded_jit: " + where + " has " + spec->str() +
                ", which names mesh axes; sharded_jit takes partition counts, PartitionSpec(2, 1) "
                "(named specs go with NamedSharding and shard_map)");
  if (spec->is_counts() && spec->counts().size() != t.shape.size())
    throw Error("sharded_jit: " + spec->str() + " of " + where + " has " + std::to_string(spec->counts().size()) +
                " dimensions but the array " + program::type_str(t) + " has rank " + std::to_string(t.shape.size()));
}

// Partition counts of a spec (ones where it is replicated), for local_in_parts / local_out_parts.
std::vector<int64_t> counts_of(const Spec& sp, const program::Type& t, const std::string& what, const std::string& where) {
  if (sp.named)
    throw Error("sharded_jit: " + what + " of " + where + " is a NamedSharding; local_in_parts and local_out_parts "
                "go with partition counts");
  check_spec(sp.counts, t, where);
  if (!sp.counts || sp.counts->replicated()) return std::vector<int64_t>(t.shape.size(), 1);
  return sp.counts->counts();
}

std::string counts_str(const Spec& sp) { return sp.counts ? sp.counts->str() : "None"; }

// The type of a process's chunk scaled to the whole (to_global) or back: each dimension by the
// global spec's count over the local one's, which must divide it.
program::Type rescaled(const program::Type& t, const Spec& global, const Spec& local, bool to_global,
                       const std::string& where) {
  const std::vector<int64_t> g = counts_of(global, t, to_global ? "in_parts" : "out_parts", where);
  const std::vector<int64_t> l = counts_of(local, t, to_global ? "local_in_parts" : "local_out_parts", where);
  program::Type out = t;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (g[d] % l[d] != 0)
      throw Error("sharded_jit: " + std::string(to_global ? "local_in_parts " : "local_out_parts ") + counts_str(local) +
                  " of " + where + " cuts dimension " + std::to_string(d) + " into " + std::to_string(l[d]) +
                  " pieces, which does not divide the " + std::to_string(g[d]) + " pieces of " + counts_str(global));
    out.shape[d] = to_global ? t.shape[d] * (g[d] / l[d]) : t.shape[d] / (g[d] / l[d]);
  }
  return out;
}

// Checks that the pieces this process's devices hold under `global` form one block that `local`
// cuts the same way (device j of the process holding local piece j).
void check_local_cut(const Sharding& global, const Sharding& local, const std::vector<int64_t>& here,
                     const std::string& what, const Spec& lspec, const Spec& gspec) {
  for (size_t d = 0; d < global.dims.size(); ++d) {
    const int64_t base = global.piece_index(d, here.at(0)) - local.piece_index(d, 0);
    for (size_t j = 0; j < here.size(); ++j)
      if (global.piece_index(d, here[j]) - local.piece_index(d, static_cast<int64_t>(j)) != base || base < 0)
        throw Error("sharded_jit: " + what + " " + counts_str(lspec) + " does not describe this process's share of " +
                    counts_str(gspec) + ": its device " + device_name(global.mesh->devices()[static_cast<size_t>(here[j])]) +
                    " holds piece " + std::to_string(global.piece_index(d, here[j])) + " of dimension " +
                    std::to_string(d) + ", not piece " + std::to_string(local.piece_index(d, static_cast<int64_t>(j))) +
                    " of this process's part");
  }
}

std::shared_ptr<detail::ShardedJitState::Entry> entry(detail::ShardedJitState& s, const std::string& key,
                                                      const std::vector<Array>& flat, const detail::TreeShape& args,
                                                      const detail::FlatFn& trace, const detail::TreeShape& out_shape) {
  std::ostringstream k;
  k << key;
  for (const Array& a : flat) k << "|" << dtype_short_name(a.dtype()) << shape_str(a.shape());
  std::lock_guard<std::mutex> lock(s.mu);
  if (auto it = s.entries.find(k.str()); it != s.entries.end()) return it->second;
  for (const Array& a : flat)
    PL_CHECK(!a.is_tracer(), "sharded_jit: called inside another transformation (jit, grad, vmap); call it at the top "
                             "level, with grad or jit inside it");
  std::vector<Spec> in_specs, local_in_specs;
  flatten_parts(s.in_parts, args, "in_parts", in_specs);
  std::vector<program::Type> in_types = program::types_of(flat);
  if (s.options.local_in_parts) {  // the arguments are this process's chunks of the global arrays
    flatten_parts(*s.options.local_in_parts, args, "local_in_parts", local_in_specs);
    for (size_t i = 0; i < in_types.size(); ++i)
      in_types[i] = rescaled(in_types[i], in_specs[i], local_in_specs[i], true, "argument " + std::to_string(i));
  }
  std::vector<Located> all;                         // partition counts, with where they came from
  std::vector<std::pair<NamedSharding, std::string>> named;  // NamedShardings (jit with shardings)
  auto note = [&](const Spec& sp, const program::Type& t, const std::string& where) {
    if (sp.named) return named.push_back({*sp.named, where});
    check_spec(sp.counts, t, where);
    if (sp.counts) all.push_back({*sp.counts, where});
  };
  for (size_t i = 0; i < in_specs.size(); ++i) note(in_specs[i], in_types[i], "argument " + std::to_string(i));
  program::Traced traced = [&] {
    TraceScope scope;
    return program::trace_flat(s.options.name, trace, in_types, Device{});
  }();
  PL_ASSERT(traced.captured.empty(), "a top-level sharded_jit trace captured outer values");
  program::Program g = program::optimize(traced.program);
  std::vector<Spec> out_specs;
  flatten_parts(s.out_parts, out_shape, "out_parts", out_specs);
  for (size_t i = 0; i < out_specs.size(); ++i) note(out_specs[i], g.type(g.outputs[i]), "output " + std::to_string(i));
  size_t constraints = 0;
  for (const program::Eqn& e : g.eqns)
    if (e.prim == program::Prim::sharding_constraint) {
      const auto* c = static_cast<const ConstraintSpec*>(e.params.callee.get());
      const std::string where = "with_sharding_constraint " + std::to_string(constraints++);
      note(Spec{c->named ? std::nullopt : std::optional<PartitionSpec>(c->spec), c->named}, g.type(e.ins[0]), where);
    }
  // The devices: a mesh the NamedShardings share, or one built from the partition counts.
  std::shared_ptr<const Mesh> mesh;
  if (!named.empty()) {
    std::vector<Located> split;
    for (const Located& l : all)
      if (!l.spec.replicated()) split.push_back(l);
    if (!split.empty())
      throw Error("sharded_jit: partition counts (" + names_of(split) + ") mixed with NamedShardings (" +
                  named[0].first.str() + ", " + named[0].second + "); use one form for a call");
    mesh = std::make_shared<const Mesh>(named[0].first.mesh);
    for (const auto& [n, where] : named)
      if (!(n.mesh == *mesh))
        throw Error("sharded_jit: the NamedShardings are on different meshes: " + named[0].first.str() + " (" +
                    named[0].second + ") and " + n.str() + " (" + where + ")");
  }
  const int64_t nparts = mesh ? mesh->size() : reconcile_partitions(all, s.options);
  const int64_t available = device_count();
  if (nparts > available)
    throw Error("sharded_jit computation requires " + std::to_string(nparts) + " devices, but only " +
                std::to_string(available) + " devices are available." +
                (available == 1 ? " (set PALLADIUM_CPU_DEVICES for virtual CPU devices)" : ""));
  // The seed's checks for calls across processes.
  const int64_t local = local_device_count();
  if (local < nparts && nparts < available)
    throw Error("sharded_jit across multiple hosts must use all available devices. Got " + std::to_string(nparts) +
                " out of " + std::to_string(available) + " requested devices (local device count: " +
                std::to_string(local) + ")");
  std::optional<int64_t> local_nparts = s.options.local_num_partitions;
  if (!local_nparts) {
    if (nparts > local)
      throw Error("Specify 'local_nparts' when using cross-process sharded_jit and all inputs and outputs are "
                  "replicated. (sharded_jit: " + std::to_string(nparts) + " partitions, " + std::to_string(local) +
                  " local devices; set ShardedJitOptions::local_num_partitions)");
    local_nparts = nparts;
  }
  if (*local_nparts > local)
    throw Error("sharded_jit computation requires " + std::to_string(*local_nparts) + " local devices, but only " +
                std::to_string(local) + " local devices are available.");
  if (!mesh) mesh = call_mesh(all, nparts);
  // Constraints resolved against the call's mesh.
  for (program::Eqn& e : g.eqns)
    if (e.prim == program::Prim::sharding_constraint) {
      auto c = std::make_shared<ConstraintSpec>(*static_cast<const ConstraintSpec*>(e.params.callee.get()));
      if (!c->named) c->named = to_named(counts_sharding(c->spec, g.type(e.ins[0]), mesh, "with_sharding_constraint"));
      PL_CHECK(c->named->mesh == *mesh, "with_sharding_constraint: ", c->named->str(),
               " is not on the call's mesh, ", mesh->str(), " (sharded_jit builds it from the partition counts)");
      e.params.callee = c;
    }
  auto resolve = [&](const Spec& sp, const program::Type& t, const std::string& where) {
    if (!sp.named) return counts_sharding(sp.counts, t, mesh, where);
    Sharding sh = from_named(*sp.named, t.shape.size(), s.options.name + " " + where);
    sh.mesh = mesh;
    for (size_t d = 0; d < t.shape.size(); ++d)
      if (t.shape[d] % sh.pieces(d) != 0)
        throw Error(s.options.name + ": " + sp.named->spec.str() + " of " + where + " splits dimension " +
                    std::to_string(d) + " of " + program::type_str(t) + " into " + std::to_string(sh.pieces(d)) +
                    " pieces, which does not divide it");
    return sh;
  };
  std::vector<Sharding> in_sh;
  for (size_t i = 0; i < in_specs.size(); ++i)
    in_sh.push_back(resolve(in_specs[i], in_types[i], "argument " + std::to_string(i)));
  std::vector<std::optional<Sharding>> out_sh;
  for (size_t i = 0; i < out_specs.size(); ++i)
    out_sh.push_back(resolve(out_specs[i], g.type(g.outputs[i]), "output " + std::to_string(i)));
  auto e = std::make_shared<detail::ShardedJitState::Entry>();
  e->traced = g;
  e->mesh = mesh;
  e->parts = partition(g, in_sh, out_sh, mesh);
  e->parts.local = program::compact(program::optimize(e->parts.local));
  program::verify(e->parts.local);
  e->exe = compile_spmd(e->parts.local, *mesh);
  if (s.options.local_in_parts || s.options.local_out_parts) {
    std::vector<Device> mine;
    for (int64_t p = 0; p < mesh->size(); ++p)
      if (is_local(mesh->devices()[static_cast<size_t>(p)])) {
        e->here.push_back(p);
        mine.push_back(mesh->devices()[static_cast<size_t>(p)]);
      }
    PL_CHECK(static_cast<int64_t>(mine.size()) == *local_nparts, "sharded_jit: local_num_partitions is ",
             *local_nparts, " but this process holds ", mine.size(), " of the call's ", nparts, " devices");
    std::vector<Spec> local_out_specs;
    if (s.options.local_out_parts) flatten_parts(*s.options.local_out_parts, out_shape, "local_out_parts", local_out_specs);
    std::vector<Located> local_counts;
    for (const std::vector<Spec>* list : {&local_in_specs, &local_out_specs})
      for (size_t i = 0; i < list->size(); ++i)
        if ((*list)[i].counts) local_counts.push_back({*(*list)[i].counts, "local part " + std::to_string(i)});
    const std::shared_ptr<const Mesh> here_mesh = counts_mesh(local_counts, mine);
    e->local_in.resize(flat.size());
    const std::vector<program::Type> chunk_types = program::types_of(flat);
    for (size_t i = 0; i < local_in_specs.size(); ++i) {
      const std::string where = "argument " + std::to_string(i);
      e->local_in[i] = counts_sharding(local_in_specs[i].counts, chunk_types[i], here_mesh, where);
      check_local_cut(e->parts.in[i], *e->local_in[i], e->here, "local_in_parts of " + where, local_in_specs[i],
                      in_specs[i]);
    }
    e->local_out.resize(out_specs.size());
    e->local_out_types.resize(out_specs.size());
    for (size_t o = 0; o < local_out_specs.size(); ++o) {
      const std::string where = "output " + std::to_string(o);
      const program::Type lt = rescaled(g.type(g.outputs[o]), out_specs[o], local_out_specs[o], false, where);
      e->local_out_types[o] = lt;
      e->local_out[o] = counts_sharding(local_out_specs[o].counts, lt, here_mesh, where);
      check_local_cut(e->parts.out[o], *e->local_out[o], e->here, "local_out_parts of " + where, local_out_specs[o],
                      out_specs[o]);
    }
  }
  s.entries[k.str()] = e;
  return e;
}

}  // namespace
}  // namespace sharding

namespace detail {

std::shared_ptr<ShardedJitState> make_sharded_jit_state(Parts in_parts, Parts out_parts, ShardedJitOptions options) {
  auto s = std::make_shared<ShardedJitState>();
  s->in_parts = std::move(in_parts);
  s->out_parts = std::move(out_parts);
  s->options = std::move(options);
  if (s->options.local_in_parts || s->options.local_out_parts)
    PL_CHECK(s->options.local_num_partitions.has_value(),
             "sharded_jit: local_in_parts/local_out_parts describe a cross-process call; pass local_num_partitions too");
  return s;
}

void sharded_jit_check_args(const ShardedJitState& s, size_t num_args) {
  for (int k : s.options.static_argnums)
    if (k < 0 || static_cast<size_t>(k) >= num_args)
      throw Error("sharded_jit: static_argnums entry " + std::to_string(k) + " is out of range for a function of " +
                  std::to_string(num_args) + " arguments");
}

std::vector<Array> sharded_jit_call(ShardedJitState& s, const std::string& key, const std::vector<Array>& flat,
                                    const TreeShape& args, const FlatFn& trace, const TreeShape& out_shape) {
  auto e = sharding::entry(s, key, flat, args, trace, out_shape);
  const int64_t n = e->mesh->size();
  std::vector<std::vector<Array>> per_device(static_cast<size_t>(n));
  for (size_t i = 0; i < flat.size(); ++i) {
    std::vector<Array> pieces;
    if (i < e->local_in.size() && e->local_in[i]) {  // this process's chunk, cut over its devices
      pieces.assign(static_cast<size_t>(n), Array());
      const std::vector<Array> mine = sharding::split(flat[i], *e->local_in[i]);
      for (size_t j = 0; j < e->here.size(); ++j) pieces[static_cast<size_t>(e->here[j])] = mine[j];
    } else {
      pieces = sharding::split(flat[i], e->parts.in[i]);
    }
    for (int64_t p = 0; p < n; ++p) per_device[static_cast<size_t>(p)].push_back(pieces[static_cast<size_t>(p)]);
  }
  const auto outs = sharding::run_spmd(e->exe, e->mesh, per_device, s.options.name);
  std::vector<Array> results;
  for (size_t o = 0; o < e->parts.out.size(); ++o) {
    if (o < e->local_out.size() && e->local_out[o]) {  // this process's chunk of the result
      std::vector<Array> mine;
      for (int64_t p : e->here) mine.push_back(outs[static_cast<size_t>(p)][o]);
      const program::Type& lt = e->local_out_types[o];
      results.push_back(sharding::make_sharded(lt.shape, lt.dtype, *e->local_out[o], std::move(mine)));
      continue;
    }
    std::vector<Array> pieces;  // undefined where another process owns the device
    for (int64_t p = 0; p < n; ++p)
      pieces.push_back(outs[static_cast<size_t>(p)].empty() ? Array() : outs[static_cast<size_t>(p)][o]);
    const program::Type& t = e->traced.type(e->traced.outputs[o]);
    results.push_back(sharding::make_sharded(t.shape, t.dtype, e->parts.out[o], std::move(pieces)));
  }
  return results;
}

std::string sharded_jit_lower(ShardedJitState& s, const std::string& key, const std::vector<Array>& flat,
                              const TreeShape& args, const FlatFn& trace, const TreeShape& out_shape) {
  auto e = sharding::entry(s, key, flat, args, trace, out_shape);
  std::ostringstream os;
  os << "--- global program ---\n" << program::print(e->traced);
  os << "--- shardings over " << e->mesh->str() << " ---\n";
  for (size_t i = 0; i < e->parts.in.size(); ++i) os << "  input " << i << ": " << e->parts.in[i].str() << "\n";
  for (const program::Eqn& q : e->traced.eqns)
    for (int v : q.outs)
      os << "  %" << v << " = " << program::prim_name(q.prim) << ": "
         << e->parts.global_vars.at(static_cast<size_t>(v)).str() << "\n";
  for (size_t i = 0; i < e->parts.out.size(); ++i) os << "  output " << i << ": " << e->parts.out[i].str() << "\n";
  os << "--- per-device program (" << e->mesh->size() << " devices) ---\n" << program::print(e->parts.local);
  os << "--- steps ---\n" << e->exe.at(0)->describe();
  return os.str();
}

}  // namespace detail

Array with_sharding_constraint(const Array& x, const PartitionSpec& spec) {
  if (sharding::t_sharded_traces == 0 || program::Trace::current() == nullptr)
    throw Error("with_sharding_constraint: called outside sharded_jit (" + spec.str() +
                "); it constrains values of a function being partitioned");
  auto c = std::make_shared<sharding::ConstraintSpec>();
  c->spec = spec;
  program::Params q;
  q.name = spec.str();
  q.callee = c;
  return program::bind1(program::Prim::sharding_constraint, std::move(q), {x});
}

Array with_sharding_constraint(const Array& x, const NamedSharding& named) {
  if (sharding::t_sharded_traces == 0 || program::Trace::current() == nullptr)
    throw Error("with_sharding_constraint: called outside sharded_jit (" + named.str() +
                "); it constrains values of a function being partitioned");
  (void)sharding::from_named(named, x.shape().size(), "with_sharding_constraint");
  auto c = std::make_shared<sharding::ConstraintSpec>();
  c->spec = named.spec;
  c->named = named;
  program::Params q;
  q.name = named.spec.str();
  q.callee = c;
  return program::bind1(program::Prim::sharding_constraint, std::move(q), {x});
}

}  // namespace palladium
