// Partitioning programs across devices: devices, Mesh, PartitionSpec, NamedSharding and sharded
// Arrays; the seed's sharded_jit with with_sharding_constraint; shard_map with its collectives.
// docs/sharding.md explains the model; docs/architecture.md ("Sharding") the pipeline.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>
#include <vector>

#include "palladium/array.h"
#include "palladium/device.h"
#include "palladium/transforms.h"
#include "palladium/value.h"

namespace palladium {

// Every device: each CUDA GPU of this process; without GPUs, PALLADIUM_CPU_DEVICES=N virtual CPU
// devices (default 1), which share the host's memory and run on one thread each;
// PALLADIUM_PLATFORM=cpu picks the virtual CPU devices where there are GPUs too. After
// distributed::initialize() in several processes: every process's devices, process by process.
std::vector<Device> devices();
int device_count();
// The devices of this process (all of them in a single process).
std::vector<Device> local_devices();
int local_device_count();

// Several processes, started by mpirun: initialize() joins them (MPI, with the device threads of
// each process talking through it). Every process brings the same number of devices. A sharded
// Array's pieces then live in the processes that own their devices, and to_host(x) gathers them:
// in a multi-process run every process must call it, in the same order (it is a collective).
namespace distributed {
void initialize();
bool is_initialized();
int process_index();  // 0 in a single process
int process_count();  // 1 in a single process
}  // namespace distributed
// A device's name in a list of devices: "cpu:0" for the first CPU device (Device::str says "cpu").
std::string device_name(Device d);

// Devices in an n-dimensional array with named axes (jax.sharding.Mesh).
class Mesh {
 public:
  Mesh() = default;
  // `devices` in row-major order over `shape`; one name per axis, all different.
  Mesh(std::vector<Device> devices, Shape shape, std::vector<std::string> axis_names);
  const std::vector<Device>& devices() const { return devices_; }
  const Shape& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return names_; }
  int64_t size() const { return static_cast<int64_t>(devices_.size()); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // The index of a named axis; an Error naming `what` and the mesh's axes if there is none.
  int axis(const std::string& name, const char* what = "Mesh") const;
  // The coordinates of the device at `position` (its index in devices()).
  std::vector<int64_t> coords(int64_t position) const;
  std::string str() const;  // "Mesh('data'=4, 'model'=2)"
  bool operator==(const Mesh&) const = default;

 private:
  std::vector<Device> devices_;
  Shape shape_;
  std::vector<std::string> names_;
};
// The first prod(shape) devices of devices(), as jax.make_mesh.
Mesh make_mesh(Shape shape, std::vector<std::string> axis_names);

// One dimension of a named PartitionSpec: pl::None (replicated), an axis name, or several names
// (split over their product, the first major).
struct AxisNames {
  std::vector<std::string> names;
  AxisNames(NoneTag) {}
  AxisNames(const char* n) : names{n} {}
  AxisNames(std::string n) : names{std::move(n)} {}
  AxisNames(std::initializer_list<std::string> ns) : names(ns) {}
};

// How an array is split. Two forms, as JAX has had them:
//  - the seed's partition counts per dimension, PartitionSpec(2, 1): 2 pieces along dimension 0
//    (for sharded_jit; PartitionSpec() or pl::None is replicated);
//  - mesh axis names per dimension, P("data", pl::None) (for NamedSharding and shard_map); missing
//    trailing dimensions are replicated.
class PartitionSpec {
 public:
  PartitionSpec() = default;
  PartitionSpec(NoneTag) {}
  template <class... I>
    requires(sizeof...(I) > 0 && (std::is_integral_v<I> && ...))
  explicit PartitionSpec(I... counts) : counts_{static_cast<int64_t>(counts)...}, form_(Form::counts) {}
  static PartitionSpec named(std::vector<AxisNames> dims);

  bool is_counts() const { return form_ == Form::counts; }
  bool is_named() const { return form_ == Form::named; }
  bool replicated() const;  // no dimension is split
  const std::vector<int64_t>& counts() const { return counts_; }
  const std::vector<AxisNames>& dims() const { return names_; }
  int64_t num_partitions() const;  // counts form: the product of the counts
  std::string str() const;         // "PartitionSpec(2, 1)", "P('data', None)", "None"

 private:
  enum class Form : uint8_t { none, counts, named };
  std::vector<int64_t> counts_;
  std::vector<AxisNames> names_;
  Form form_ = Form::none;
};
template <class... T> PartitionSpec P(T&&... dims) {
  return PartitionSpec::named(std::vector<AxisNames>{AxisNames(std::forward<T>(dims))...});
}

// A mesh and a named spec (jax.sharding.NamedSharding).
struct NamedSharding {
  Mesh mesh;
  PartitionSpec spec;
  NamedSharding() = default;
  NamedSharding(Mesh m, PartitionSpec s);  // checks that s is named and its axes exist
  std::string str() const;
};

// The piece of a sharded Array on each device of its mesh.
namespace detail {
struct ShardedValue {
  NamedSharding sharding;
  std::vector<Array> pieces;  // one per mesh device, in mesh order; each on its device
};
Device first_piece_device(const ShardedValue& v);
[[noreturn]] void sharded_data_error(const char* what, const Array& a);
// The global value of a sharded Array, on the host.
Array gather_pieces(const Array& a);
}  // namespace detail

// x split over the mesh as `sharding` says (each device gets its piece). A sharded x is resharded.
Array device_put(const Array& x, const NamedSharding& sharding);
// The sharding of a sharded Array (an Error for one that is not).
const NamedSharding& sharding_of(const Array& x);
// Which device holds which slice, one line per device: "cpu:1  [0:4, 8:16]".
std::string layout_str(const Array& x);

// ---- the seed's sharded_jit ----------------------------------------------------------------
// in_parts / out_parts: one PartitionSpec for every Array, or a list with one entry per argument
// (per output), each a spec for all of that argument's Arrays or a list over its elements; pl::None
// (or PartitionSpec()) is replicated.
struct Parts {
  std::optional<PartitionSpec> spec;  // a leaf (nullopt with no children: None)
  std::optional<NamedSharding> named; // a leaf given as a NamedSharding (jit with shardings)
  std::vector<Parts> children;
  bool is_list = false;
  Parts() = default;
  Parts(NoneTag) {}
  Parts(PartitionSpec s) : spec(std::move(s)) {}
  Parts(NamedSharding n) : named(std::move(n)) {}
  Parts(std::initializer_list<Parts> list) : children(list), is_list(true) {}
  std::string str() const;
};

struct ShardedJitOptions {
  std::optional<int64_t> num_partitions;  // needed when every spec is replicated
  std::optional<Parts> local_in_parts;    // several processes: the specs of this process's part
  std::optional<Parts> local_out_parts;
  std::optional<int64_t> local_num_partitions;
  std::vector<int> static_argnums;        // arguments passed to f as they are (numbers, strings)
  std::string name = "sharded_jit";
};

namespace detail {
// The structure of an argument (how many Arrays, and its elements'), to match Parts against.
struct TreeShape {
  size_t leaves = 0;
  std::vector<TreeShape> children;  // empty for an Array
};
template <class T> struct TreeShapeOf;
template <> struct TreeShapeOf<Array> {
  static TreeShape get(const Array&) { return {1, {}}; }
};
template <class T> struct TreeShapeOf<std::vector<T>> {
  static TreeShape get(const std::vector<T>& v) {
    TreeShape s;
    for (const T& x : v) s.children.push_back(TreeShapeOf<T>::get(x)), s.leaves += s.children.back().leaves;
    return s;
  }
};
template <class T, size_t N> struct TreeShapeOf<std::array<T, N>> {
  static TreeShape get(const std::array<T, N>& v) {
    TreeShape s;
    for (const T& x : v) s.children.push_back(TreeShapeOf<T>::get(x)), s.leaves += s.children.back().leaves;
    return s;
  }
};
template <class... T> struct TreeShapeOf<std::tuple<T...>> {
  static TreeShape get(const std::tuple<T...>& t) {
    TreeShape s;
    std::apply([&](const auto&... x) {
      ((s.children.push_back(TreeShapeOf<std::decay_t<decltype(x)>>::get(x)), s.leaves += s.children.back().leaves), ...);
    }, t);
    return s;
  }
};
template <class A, class B> struct TreeShapeOf<std::pair<A, B>> {
  static TreeShape get(const std::pair<A, B>& p) {
    TreeShape s;
    s.children = {TreeShapeOf<A>::get(p.first), TreeShapeOf<B>::get(p.second)};
    s.leaves = s.children[0].leaves + s.children[1].leaves;
    return s;
  }
};

// A static argument's part of the cache key.
inline std::string static_key(const std::string& s) { return "s:" + s; }
inline std::string static_key(const char* s) { return "s:" + std::string(s); }
template <class T>
  requires std::is_arithmetic_v<T>
std::string static_key(T v) { return "n:" + std::to_string(v); }
template <class T>
  requires(!std::is_arithmetic_v<T>)
std::string static_key(const T&) {
  throw Error("sharded_jit: a static argument (static_argnums) must be a number or a string");
}

struct ShardedJitState;
std::shared_ptr<ShardedJitState> make_sharded_jit_state(Parts in_parts, Parts out_parts, ShardedJitOptions options);
// Checks the call against its options (static_argnums in range) before anything is traced.
void sharded_jit_check_args(const ShardedJitState& s, size_t num_args);
// Traces (once per key), propagates, partitions, compiles and runs over the flat Arrays.
// `out_shape` is filled by `trace` when it runs (the results' structure, to match out_parts against).
std::vector<Array> sharded_jit_call(ShardedJitState& s, const std::string& key, const std::vector<Array>& flat,
                                    const TreeShape& args, const FlatFn& trace, const TreeShape& out_shape);
// The entry a call with the same `key` uses (its steps tell how it has run).
std::string sharded_jit_lower(ShardedJitState& s, const std::string& key, const std::vector<Array>& flat,
                              const TreeShape& args, const FlatFn& trace, const TreeShape& out_shape);
}  // namespace detail

template <class F> class ShardedJitted {
 public:
  ShardedJitted(F f, Parts in, Parts out, ShardedJitOptions o)
      : f_(std::move(f)), static_argnums_(o.static_argnums),
        state_(detail::make_sharded_jit_state(std::move(in), std::move(out), std::move(o))) {}
  template <class... A> auto operator()(const A&... args) const {
    using R = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
    Prepared p = prepare(args...);
    std::vector<Array> outs = detail::sharded_jit_call(*state_, p.key, p.flat, p.shape, p.trace, *p.out_shape);
    if (*p.out_proto) protos_.remember(p.key, *p.out_proto);
    const std::shared_ptr<void> proto = protos_.find(p.key);
    if (!proto) throw InternalError("sharded_jit: no result structure for a call that was not traced");
    return detail::tree_rebuild(outs, *std::static_pointer_cast<R>(proto));
  }
  // The global program, the propagated shardings and the per-device program with its collectives.
  template <class... A> std::string lower(const A&... args) const {
    Prepared p = prepare(args...);
    std::string text = detail::sharded_jit_lower(*state_, p.key, p.flat, p.shape, p.trace, *p.out_shape);
    if (*p.out_proto) protos_.remember(p.key, *p.out_proto);  // a trace made here serves later calls
    return text;
  }

 private:
  struct Prepared {
    std::string key;
    std::vector<Array> flat;
    detail::TreeShape shape;
    detail::FlatFn trace;
    std::shared_ptr<std::shared_ptr<void>> out_proto = std::make_shared<std::shared_ptr<void>>();
    std::shared_ptr<detail::TreeShape> out_shape = std::make_shared<detail::TreeShape>();
  };
  static bool listed(const std::vector<int>& statics, size_t i) {
    for (int k : statics)
      if (k == static_cast<int>(i)) return true;
    return false;
  }
  template <class... A> Prepared prepare(const A&... args) const {
    detail::sharded_jit_check_args(*state_, sizeof...(A));
    Prepared p;
    std::tuple<A...> proto{args...};
    p.key = typeid(std::tuple<A...>).name();
    // The Arrays of the non-static arguments, flattened; the statics' values go into the key.
    [&]<size_t... I>(std::index_sequence<I...>) {
      ((void)[&] {
        using T = std::decay_t<std::tuple_element_t<I, std::tuple<A...>>>;
        if (listed(static_argnums_, I)) {
          p.key += "|" + detail::static_key(std::get<I>(proto));
          return;
        }
        if constexpr (detail::is_array_tree<T>::value) {
          detail::Tree<T>::flatten(std::get<I>(proto), p.flat);
          p.shape.children.push_back(detail::TreeShapeOf<T>::get(std::get<I>(proto)));
          p.shape.leaves += p.shape.children.back().leaves;
        } else {
          throw Error("sharded_jit: argument " + std::to_string(I) +
                      " is not an Array (or a structure of them); list it in static_argnums");
        }
      }(), ...);
    }(std::index_sequence_for<A...>{});
    p.trace = [f = f_, proto, out_proto = p.out_proto, out_shape = p.out_shape,
               statics = static_argnums_](const std::vector<Array>& flat) {
      size_t pos = 0;
      auto arg = [&]<size_t J>(std::integral_constant<size_t, J>) {
        using T = std::decay_t<std::tuple_element_t<J, std::tuple<A...>>>;
        if constexpr (detail::is_array_tree<T>::value) {
          if (!listed(statics, J)) return detail::Tree<T>::rebuild(flat, pos, std::get<J>(proto));
        }
        return std::get<J>(proto);
      };
      std::tuple<A...> rebuilt = [&]<size_t... I>(std::index_sequence<I...>) {
        return std::tuple<A...>{arg(std::integral_constant<size_t, I>{})...};  // braces: left to right
      }(std::index_sequence_for<A...>{});
      using R = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
      R r = std::apply(f, rebuilt);
      *out_proto = std::make_shared<R>(r);
      *out_shape = detail::TreeShapeOf<R>::get(r);
      return detail::tree_flatten(r);
    };
    return p;
  }
  F f_;
  std::vector<int> static_argnums_;
  std::shared_ptr<detail::ShardedJitState> state_;
  detail::ResultProtos protos_;
};

// sharded_jit(f, in_parts, out_parts, options): f jitted and partitioned over num_partitions
// devices as the specs and f's with_sharding_constraint calls say; the collectives between the
// devices are inserted where the shardings disagree. Results are sharded Arrays.
template <class F>
ShardedJitted<F> sharded_jit(F f, Parts in_parts, Parts out_parts, ShardedJitOptions options = {}) {
  return ShardedJitted<F>(std::move(f), std::move(in_parts), std::move(out_parts), std::move(options));
}

// jit with in_shardings / out_shardings (the modern API): NamedShardings over one mesh, pl::None
// for replicated, in the same structures as sharded_jit's parts.
// (Only these two members, so that jit(f, {.name = ...}) still means JitOptions.)
struct JitShardings {
  Parts in_shardings;
  Parts out_shardings;
};
template <class F> ShardedJitted<F> jit(F f, JitShardings s) {
  ShardedJitOptions o;
  o.name = "jit";
  return ShardedJitted<F>(std::move(f), std::move(s.in_shardings), std::move(s.out_shardings), std::move(o));
}

// Inside sharded_jit: x with the given sharding (an identity that pins the partitioning; it may
// flow to x's producers and to its users). Outside sharded_jit it is an Error.
Array with_sharding_constraint(const Array& x, const PartitionSpec& spec);
Array with_sharding_constraint(const Array& x, const NamedSharding& sharding);

// ---- shard_map ------------------------------------------------------------------------------
namespace detail {
// What one shard_map has traced and compiled, per signature of its arguments.
struct ShardMapCache;
std::shared_ptr<ShardMapCache> make_shard_map_cache();
// Runs f's per-device program (traced and compiled on the first call with these argument types;
// `out_proto` receives the result structure that trace recorded).
std::vector<Array> shard_map_call(const std::string& name, const FlatFn& f, const Mesh& mesh,
                                  const std::vector<PartitionSpec>& in_specs, const std::vector<Array>& args,
                                  const std::vector<PartitionSpec>& out_specs, ShardMapCache& cache,
                                  const std::string& key, std::shared_ptr<void>& out_proto);
}  // namespace detail

// shard_map(f, mesh, in_specs, out_specs): f runs once per device of the mesh on its pieces (local
// shapes) and communicates only through the collectives below; the results' pieces form global
// Arrays by out_specs (a dimension the spec does not split must be equal on the devices it spans).
// One spec per argument and per result (Arrays only). f is traced and compiled once per signature
// of the arguments (shapes, dtypes, structure).
template <class F> auto shard_map(F f, Mesh mesh, std::vector<PartitionSpec> in_specs,
                                  std::vector<PartitionSpec> out_specs) {
  return [f, mesh, in_specs, out_specs, cache = detail::make_shard_map_cache()](const auto&... args) {
    auto proto = std::make_tuple(args...);
    std::shared_ptr<void> out_proto;
    auto flat_f = detail::flat_fn(f, proto, out_proto);
    std::vector<Array> outs = detail::shard_map_call("shard_map", flat_f, mesh, in_specs, detail::tree_flatten(proto),
                                                     out_specs, *cache, typeid(proto).name(), out_proto);
    using R = std::decay_t<std::invoke_result_t<const F&, const decltype(args)&...>>;
    return detail::tree_rebuild(outs, *std::static_pointer_cast<R>(out_proto));
  };
}

// Collectives over named mesh axes, inside shard_map (an Error elsewhere).
Array psum(const Array& x, const AxisNames& axes);
Array pmean(const Array& x, const AxisNames& axes);
Array pmax(const Array& x, const AxisNames& axes);
Array pmin(const Array& x, const AxisNames& axes);
// The pieces of x along the axes concatenated on dimension `axis` (tiled), or stacked in a new
// leading dimension `axis` (tiled = false).
Array all_gather(const Array& x, const AxisNames& axes, int64_t axis = 0, bool tiled = false);
// psum, each device keeping its piece of dimension `axis` (which the group size must divide).
Array psum_scatter(const Array& x, const AxisNames& axes, int64_t axis = 0, bool tiled = true);
// Sends x along one axis: perm lists (source, destination) index pairs; devices nobody sends to get zeros.
Array ppermute(const Array& x, const std::string& axis, const std::vector<std::pair<int64_t, int64_t>>& perm);
// This device's index along the axes (int32 scalar).
Array axis_index(const AxisNames& axes);

}  // namespace palladium
