// Transformations of functions over Arrays: jit, vjp / grad / value_and_grad / jvp, custom_vjp,
// vmap, and control flow over Arrays (scan, fori_loop, while_loop, cond). Each traces the C++
// callable once into the program IR and rewrites or runs that program, so they nest in any order.
//
// Arguments and results are Arrays, or std::vector / std::tuple / std::pair / std::array of them
// (nested); static parameters are captures of the callable (functools.partial in the seeds).
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "palladium/array.h"
#include "palladium/call.h"
#include "palladium/numpy.h"

namespace palladium {

namespace detail {

// Flattening structures of Arrays into lists of leaves and back (JAX's pytrees).
template <class T> struct Tree {
  static_assert(sizeof(T) == 0, "a transformed function takes and returns Arrays, or std::vector, std::tuple, "
                                "std::pair or std::array of them");
};
template <> struct Tree<Array> {
  static void flatten(const Array& a, std::vector<Array>& out) { out.push_back(a); }
  static Array rebuild(const std::vector<Array>& in, size_t& pos, const Array&) { return in.at(pos++); }
};
template <class T> struct Tree<std::vector<T>> {
  static void flatten(const std::vector<T>& v, std::vector<Array>& out) {
    for (const T& x : v) Tree<T>::flatten(x, out);
  }
  static std::vector<T> rebuild(const std::vector<Array>& in, size_t& pos, const std::vector<T>& proto) {
    std::vector<T> v;
    for (const T& p : proto) v.push_back(Tree<T>::rebuild(in, pos, p));
    return v;
  }
};
template <class T, size_t N> struct Tree<std::array<T, N>> {
  static void flatten(const std::array<T, N>& v, std::vector<Array>& out) {
    for (const T& x : v) Tree<T>::flatten(x, out);
  }
  static std::array<T, N> rebuild(const std::vector<Array>& in, size_t& pos, const std::array<T, N>& proto) {
    std::array<T, N> v;
    for (size_t i = 0; i < N; ++i) v[i] = Tree<T>::rebuild(in, pos, proto[i]);
    return v;
  }
};
template <class... T> struct Tree<std::tuple<T...>> {
  static void flatten(const std::tuple<T...>& t, std::vector<Array>& out) {
    std::apply([&](const auto&... x) { (Tree<std::decay_t<decltype(x)>>::flatten(x, out), ...); }, t);
  }
  static std::tuple<T...> rebuild(const std::vector<Array>& in, size_t& pos, const std::tuple<T...>& proto) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return std::tuple<T...>{Tree<T>::rebuild(in, pos, std::get<I>(proto))...};  // braces: left to right
    }(std::index_sequence_for<T...>{});
  }
};
template <class A, class B> struct Tree<std::pair<A, B>> {
  static void flatten(const std::pair<A, B>& t, std::vector<Array>& out) {
    Tree<A>::flatten(t.first, out);
    Tree<B>::flatten(t.second, out);
  }
  static std::pair<A, B> rebuild(const std::vector<Array>& in, size_t& pos, const std::pair<A, B>& proto) {
    A a = Tree<A>::rebuild(in, pos, proto.first);
    B b = Tree<B>::rebuild(in, pos, proto.second);
    return {std::move(a), std::move(b)};
  }
};
// Whether T is an Array or a structure of them (keeps the Array overloads of fori_loop and
// while_loop apart from the kernel language's, whose carries are Values).
template <class T> struct is_array_tree : std::false_type {};
template <> struct is_array_tree<Array> : std::true_type {};
template <class T> struct is_array_tree<std::vector<T>> : is_array_tree<T> {};
template <class T, size_t N> struct is_array_tree<std::array<T, N>> : is_array_tree<T> {};
template <class... T> struct is_array_tree<std::tuple<T...>> : std::bool_constant<(is_array_tree<T>::value && ...)> {};
template <class A, class B> struct is_array_tree<std::pair<A, B>>
    : std::bool_constant<is_array_tree<A>::value && is_array_tree<B>::value> {};

template <class T> std::vector<Array> tree_flatten(const T& t) {
  std::vector<Array> out;
  Tree<T>::flatten(t, out);
  return out;
}
template <class T> T tree_rebuild(const std::vector<Array>& flat, const T& proto, size_t pos = 0) {
  return Tree<T>::rebuild(flat, pos, proto);
}
template <class T> size_t leaf_count(const T& t) { return tree_flatten(t).size(); }

using FlatFn = std::function<std::vector<Array>(const std::vector<Array>&)>;

// ---- non-template machinery (src/transforms/) ----
struct JitState;
std::shared_ptr<JitState> make_jit_state(std::string name, std::string backend, bool fuse);
// Runs the flat function under jit: traced once per signature `key`, optimised, compiled and cached.
// `trace` is called with tracers and returns the flat outputs; `on_trace` runs after each trace.
std::vector<Array> jit_call(JitState& s, const std::string& key, const std::vector<Array>& flat, const FlatFn& trace);
std::string jit_lower(JitState& s, const std::string& key, const std::vector<Array>& flat, const FlatFn& trace);
int jit_trace_count(const JitState& s);

// Reverse mode on a flat function: the primal outputs, and the cotangents of the inputs marked in
// `wrt` for the given output cotangents (traced and evaluated together).
struct VjpResult {
  std::vector<Array> outs;
  std::function<std::vector<Array>(const std::vector<Array>& cts)> backward;
};
VjpResult vjp_flat(const FlatFn& f, const std::vector<Array>& primals, const std::vector<bool>& wrt, const char* what);
// grad's checks and call: f's first output must be one float scalar (later outputs are aux); returns
// the outputs, then one gradient per primal (undefined where not in wrt).
std::vector<Array> grad_flat(const FlatFn& f, const std::vector<Array>& primals, const std::vector<bool>& wrt,
                             const char* what);
// Forward mode: outputs and their tangents (the transpose of the VJP, which is linear).
std::pair<std::vector<Array>, std::vector<Array>> jvp_flat(const FlatFn& f, const std::vector<Array>& primals,
                                                           const std::vector<Array>& tangents);
// vmap on a flat function: in_axes per leaf (-1: unbatched); outputs batched along axis 0.
std::vector<Array> vmap_flat(const FlatFn& f, const std::vector<Array>& args, const std::vector<int64_t>& in_axes);
// custom_vjp: binds the primitive (primal traced now; fwd/bwd called by the VJP transform).
std::vector<Array> custom_vjp_call(const std::string& name, const FlatFn& primal, const FlatFn& fwd,
                                   const std::function<std::vector<Array>(const std::vector<Array>&,
                                                                          const std::vector<Array>&)>& bwd,
                                   const std::vector<Array>& args);
// Control flow: body programs traced once, run as loops of compiled steps.
std::vector<Array> scan_flat(const FlatFn& body, size_t n_carry, const std::vector<Array>& init,
                             const std::vector<Array>& xs, int64_t length, bool reverse);
std::vector<Array> while_flat(const FlatFn& cond, const FlatFn& body, const std::vector<Array>& init);
std::vector<Array> cond_flat(const Array& pred, const FlatFn& on_true, const FlatFn& on_false,
                             const std::vector<Array>& operands);

// The result structure of each traced signature: a transformed function's results are rebuilt from
// the flat Arrays into it (recorded when the signature is traced; shared by copies of the function).
class ResultProtos {
 public:
  void remember(const std::string& key, std::shared_ptr<void> p) const {
    for (auto& [k, v] : *protos_)
      if (k == key) { v = std::move(p); return; }
    protos_->emplace_back(key, std::move(p));
  }
  std::shared_ptr<void> find(const std::string& key) const {
    for (auto& [k, v] : *protos_)
      if (k == key) return v;
    return nullptr;
  }

 private:
  std::shared_ptr<std::vector<std::pair<std::string, std::shared_ptr<void>>>> protos_ =
      std::make_shared<std::vector<std::pair<std::string, std::shared_ptr<void>>>>();
};

template <class F, class... A> FlatFn flat_fn(const F& f, const std::tuple<A...>& proto_args,
                                              std::shared_ptr<void>& out_proto) {
  using R = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
  return [f, proto_args, &out_proto](const std::vector<Array>& flat) {
    std::tuple<A...> args = tree_rebuild(flat, proto_args);
    R r = std::apply(f, args);
    out_proto = std::make_shared<R>(r);
    return tree_flatten(r);
  };
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// jit(f): traced once per input signature (shapes, dtypes, structure), optimised (dead code,
// common subexpressions, fusion of elementwise chains) and run as compiled kernels. Called inside
// another transformation, the function is traced into the enclosing program instead.
struct JitOptions {
  std::string name = "jit";
  std::string backend;  // "" = the arrays' device's default
  bool fuse = true;
};

template <class F> class Jitted {
 public:
  Jitted(F f, JitOptions o) : f_(std::move(f)), state_(detail::make_jit_state(o.name, o.backend, o.fuse)) {}
  template <class... A> auto operator()(const A&... args) const {
    using R = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
    std::tuple<A...> proto{args...};
    std::vector<Array> flat = detail::tree_flatten(proto);
    std::shared_ptr<void> out_proto;
    detail::FlatFn trace = detail::flat_fn(f_, proto, out_proto);
    const std::string key = typeid(std::tuple<A...>).name();
    std::vector<Array> outs = detail::jit_call(*state_, key, flat, trace);
    if (out_proto) protos_.remember(key, out_proto);
    const std::shared_ptr<void> result = protos_.find(key);
    PL_ASSERT(result != nullptr, "jit: no result structure was recorded for this signature");
    return detail::tree_rebuild(outs, *std::static_pointer_cast<R>(result));
  }
  // The program before and after optimisation, and the compiled steps, for these arguments.
  template <class... A> std::string lower(const A&... args) const {
    std::tuple<A...> proto{args...};
    std::shared_ptr<void> out_proto;
    // The same compiled entry as a call with these arguments (its describe() tells how it has run),
    // so a trace made here must leave the result's structure for the calls that reuse it.
    const std::string key = typeid(std::tuple<A...>).name();
    std::string text = detail::jit_lower(*state_, key, detail::tree_flatten(proto), detail::flat_fn(f_, proto, out_proto));
    if (out_proto) protos_.remember(key, out_proto);
    return text;
  }
  int trace_count() const { return detail::jit_trace_count(*state_); }

 private:
  F f_;
  std::shared_ptr<detail::JitState> state_;
  detail::ResultProtos protos_;
};
template <class F> Jitted<F> jit(F f, JitOptions options = {}) { return Jitted<F>(std::move(f), std::move(options)); }

// ---------------------------------------------------------------------------------------------
// Autodiff. grad<I, J...> picks the differentiated arguments (default: the first); their gradients
// come back in their own structure: one argument -> its type, several -> a std::tuple.
namespace detail {
template <class... A> std::vector<bool> wrt_mask(const std::tuple<A...>& args, const std::vector<int>& argnums,
                                                 const char* what) {
  std::vector<bool> mask;
  int index = 0;
  std::apply([&](const auto&... a) {
    ((void)[&] {
      const size_t n = leaf_count(a);
      bool on = false;
      for (int k : argnums) on = on || k == index;
      mask.insert(mask.end(), n, on);
      ++index;
    }(), ...);
  }, args);
  for (int k : argnums)
    if (k < 0 || k >= index)
      throw Error(std::string(what) + ": argnums entry " + std::to_string(k) + " is out of range for a function of " +
                  std::to_string(index) + " arguments");
  return mask;
}
// The gradients of the argnums arguments, rebuilt in their structure.
template <class... A> auto pick_grads(const std::vector<Array>& flat_grads, const std::tuple<A...>& args) {
  std::vector<std::vector<Array>> per_arg;
  size_t pos = 0;
  std::apply([&](const auto&... a) { ((per_arg.push_back(std::vector<Array>(flat_grads.begin() + static_cast<std::ptrdiff_t>(pos), flat_grads.begin() + static_cast<std::ptrdiff_t>(pos + leaf_count(a)))), pos += leaf_count(a)), ...); }, args);
  return per_arg;
}
template <size_t I, class... A> auto grad_of(const std::vector<std::vector<Array>>& g, const std::tuple<A...>& args) {
  return tree_rebuild(g[I], std::get<I>(args));
}
}  // namespace detail

// grad(f)(args...): the gradient of a scalar float f with respect to argument 0 (the result has the
// argument's type). grad<I, J...>(f) differentiates arguments I, J... (a std::tuple when several).
// value_and_grad(f)(args...): (f(args...), grad). With has_aux (value_and_grad<true>), f returns
// std::pair<Array, Aux> and the result is ((loss, aux), grad).
namespace detail {
// value_and_grad's body; `what` names the transformation in errors.
template <int... Argnums, class F> auto value_and_grad_named(F f, const char* what) {
  return [f, what](const auto&... args) {
    auto proto = std::make_tuple(args...);
    constexpr bool defaulted = sizeof...(Argnums) == 0;
    std::vector<int> argnums = defaulted ? std::vector<int>{0} : std::vector<int>{Argnums...};
    std::vector<bool> mask = wrt_mask(proto, argnums, what);
    std::shared_ptr<void> out_proto;
    using R = std::decay_t<std::invoke_result_t<const F&, const decltype(args)&...>>;
    std::vector<Array> flat = grad_flat(flat_fn(f, proto, out_proto), tree_flatten(proto), mask, what);
    const R& rp = *std::static_pointer_cast<R>(out_proto);
    const size_t n_out = leaf_count(rp);
    R value = tree_rebuild(std::vector<Array>(flat.begin(), flat.begin() + static_cast<std::ptrdiff_t>(n_out)), rp);
    std::vector<Array> g(flat.begin() + static_cast<std::ptrdiff_t>(n_out), flat.end());
    auto per = pick_grads(g, proto);
    if constexpr (defaulted) return std::make_pair(value, grad_of<0>(per, proto));
    else if constexpr (sizeof...(Argnums) == 1) return std::make_pair(value, grad_of<Argnums...>(per, proto));
    else return std::make_pair(value, std::make_tuple(grad_of<Argnums>(per, proto)...));
  };
}
}  // namespace detail

// value_and_grad<HasAux, Argnums...>(f): the loss is f's first output; with HasAux, f returns
// std::pair<Array, Aux> and the value is that pair. (The result's structure carries the aux either
// way; HasAux is JAX's spelling and changes nothing here.)
template <bool HasAux = false, int... Argnums, class F> auto value_and_grad(F f) {
  return detail::value_and_grad_named<Argnums...>(std::move(f), "value_and_grad");
}

// grad is value_and_grad without the value (one program computes both).
template <int... Argnums, class F> auto grad(F f) {
  return [g = detail::value_and_grad_named<Argnums...>(std::move(f), "grad")](const auto&... args) {
    return g(args...).second;
  };
}

// vjp(f, primals...): (f(primals...), vjp_fn) where vjp_fn(cotangent of the output) returns the
// cotangents of every argument as a std::tuple in the arguments' structure.
template <class F, class... A> auto vjp(F f, const A&... primals) {
  using R = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
  auto proto = std::make_tuple(primals...);
  auto out_proto = std::make_shared<std::shared_ptr<void>>();
  auto fn = [f, proto, out_proto](const std::vector<Array>& flat) {
    std::tuple<A...> args = detail::tree_rebuild(flat, proto);
    R r = std::apply(f, args);
    *out_proto = std::make_shared<R>(r);
    return detail::tree_flatten(r);
  };
  std::vector<Array> flat = detail::tree_flatten(proto);
  detail::VjpResult v = detail::vjp_flat(fn, flat, std::vector<bool>(flat.size(), true), "vjp");
  R out = detail::tree_rebuild(v.outs, *std::static_pointer_cast<R>(*out_proto));
  auto backward = [v, proto](const R& ct) {
    std::vector<Array> g = v.backward(detail::tree_flatten(ct));
    return detail::tree_rebuild(g, proto);
  };
  return std::make_pair(out, backward);
}

// jvp(f, primals, tangents): (f(primals), the directional derivative along tangents).
template <class F, class... A> auto jvp(F f, const std::tuple<A...>& primals, const std::tuple<A...>& tangents) {
  using R = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
  std::shared_ptr<void> out_proto;
  auto [outs, touts] = detail::jvp_flat(detail::flat_fn(f, primals, out_proto), detail::tree_flatten(primals),
                                        detail::tree_flatten(tangents));
  const R& rp = *std::static_pointer_cast<R>(out_proto);
  return std::make_pair(detail::tree_rebuild(outs, rp), detail::tree_rebuild(touts, rp));
}

// custom_vjp(name, f, fwd, bwd) as jax.custom_vjp with defvjp: fwd(args...) returns
// std::pair<R, Res> (the output and residuals); bwd(res, cotangent of R) returns a std::tuple with
// one cotangent per argument, each of the argument's shape and dtype.
template <class F, class Fwd, class Bwd> auto custom_vjp(std::string name, F f, Fwd fwd, Bwd bwd) {
  return [name, f, fwd, bwd](const auto&... args) {
    auto proto = std::make_tuple(args...);
    using R = std::decay_t<std::invoke_result_t<const F&, const decltype(args)&...>>;
    using FR = std::decay_t<std::invoke_result_t<const Fwd&, const decltype(args)&...>>;
    using Res = std::decay_t<typename FR::second_type>;
    std::shared_ptr<void> out_proto;
    detail::FlatFn primal = detail::flat_fn(f, proto, out_proto);
    auto res_proto = std::make_shared<std::shared_ptr<void>>();
    auto r_proto = std::make_shared<std::shared_ptr<void>>();
    detail::FlatFn fwd_flat = [fwd, proto, res_proto, r_proto](const std::vector<Array>& flat) {
      FR fr = std::apply(fwd, detail::tree_rebuild(flat, proto));
      *res_proto = std::make_shared<Res>(fr.second);
      *r_proto = std::make_shared<R>(fr.first);
      std::vector<Array> out = detail::tree_flatten(fr.first);
      std::vector<Array> res = detail::tree_flatten(fr.second);
      out.insert(out.end(), res.begin(), res.end());
      return out;
    };
    auto bwd_flat = [bwd, res_proto, r_proto](const std::vector<Array>& res, const std::vector<Array>& cts) {
      const Res& rp = *std::static_pointer_cast<Res>(*res_proto);
      const R& op = *std::static_pointer_cast<R>(*r_proto);
      return detail::tree_flatten(bwd(detail::tree_rebuild(res, rp), detail::tree_rebuild(cts, op)));
    };
    // The output structure comes from tracing the primal once, on the arguments' types.
    std::vector<Array> flat = detail::tree_flatten(proto);
    std::vector<Array> outs = detail::custom_vjp_call(name, primal, fwd_flat, bwd_flat, flat);
    return detail::tree_rebuild(outs, *std::static_pointer_cast<R>(out_proto));
  };
}

// vmap(f, in_axes): f mapped over axis in_axes[i] of argument i (pl::None: not mapped; default: axis
// 0 of every argument); results are stacked along axis 0. A pallas_call keeps its own rule (a new
// grid axis), so vmap of a function that calls kernels batches the kernels.
template <class F> auto vmap(F f, std::vector<InAxis> in_axes = {}) {
  return [f, in_axes](const auto&... args) {
    auto proto = std::make_tuple(args...);
    std::vector<int64_t> leaf_axes;
    size_t index = 0;
    std::apply([&](const auto&... a) {
      ((void)[&] {
        const size_t n = detail::leaf_count(a);
        const std::optional<int64_t> ax = in_axes.empty() ? std::optional<int64_t>(0)
                                          : index < in_axes.size() ? in_axes[index].axis
                                                                   : throw Error("vmap: in_axes has " + std::to_string(in_axes.size()) +
                                                                                 " entries for " + std::to_string(sizeof...(args)) + " arguments");
        leaf_axes.insert(leaf_axes.end(), n, ax ? *ax : -1);
        ++index;
      }(), ...);
    }, proto);
    using R = std::decay_t<std::invoke_result_t<const F&, const decltype(args)&...>>;
    std::shared_ptr<void> out_proto;
    std::vector<Array> outs = detail::vmap_flat(detail::flat_fn(f, proto, out_proto), detail::tree_flatten(proto), leaf_axes);
    return detail::tree_rebuild(outs, *std::static_pointer_cast<R>(out_proto));
  };
}

// ---------------------------------------------------------------------------------------------
// Control flow over Arrays. Bodies are traced once and run as compiled loops on the arrays'
// device; all of them compose with jit, grad (scan and fori_loop) and vmap.

// lax.scan: body(carry, x) -> std::pair(carry, y) over the leading axis of xs; returns
// (final carry, ys stacked along axis 0). xs may be a structure of Arrays or, with `length`, an
// empty std::vector<Array>.
template <class Body, class C, class X>
auto scan(Body body, const C& init, const X& xs, int64_t length = -1, bool reverse = false) {
  using Out = std::decay_t<std::invoke_result_t<const Body&, const C&, const X&>>;
  using Y = std::decay_t<typename Out::second_type>;
  std::vector<Array> xflat = detail::tree_flatten(xs);
  if (length < 0) {
    PL_CHECK(!xflat.empty(), "scan: give `length` when xs has no arrays");
    PL_CHECK(xflat[0].ndim() >= 1, "scan: xs must have a leading axis to scan over");
    length = xflat[0].shape()[0];
  }
  auto y_proto = std::make_shared<std::shared_ptr<void>>();
  std::vector<Array> init_flat = detail::tree_flatten(init);
  const size_t n_carry = init_flat.size();
  detail::FlatFn flat = [body, init, xs, y_proto, n_carry](const std::vector<Array>& in) {
    std::vector<Array> c(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n_carry));
    std::vector<Array> x(in.begin() + static_cast<std::ptrdiff_t>(n_carry), in.end());
    Out o = body(detail::tree_rebuild(c, init), detail::tree_rebuild(x, xs));
    *y_proto = std::make_shared<Y>(o.second);
    std::vector<Array> r = detail::tree_flatten(o.first);
    std::vector<Array> ys = detail::tree_flatten(o.second);
    r.insert(r.end(), ys.begin(), ys.end());
    return r;
  };
  std::vector<Array> outs = detail::scan_flat(flat, n_carry, init_flat, xflat, length, reverse);
  C carry = detail::tree_rebuild(std::vector<Array>(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(n_carry)), init);
  Y ys = detail::tree_rebuild(std::vector<Array>(outs.begin() + static_cast<std::ptrdiff_t>(n_carry), outs.end()),
                         *std::static_pointer_cast<Y>(*y_proto));
  return std::make_pair(carry, ys);
}

// lax.fori_loop over Arrays with static bounds: body(i, carry) -> carry, i an int32 scalar Array.
template <class Body, class C>
  requires(detail::is_array_tree<C>::value && std::is_invocable_v<const Body&, const Array&, const C&>)
C fori_loop(int64_t lower, int64_t upper, Body body, const C& init) {
  const int64_t n = upper > lower ? upper - lower : 0;
  auto step = [body, lower](const C& c, const Array& i) {
    return std::make_pair(C(body(i + static_cast<int>(lower), c)), std::vector<Array>{});
  };
  return scan(step, init, lax::iota(DType::int32, {n}, 0), n).first;
}

// lax.while_loop: cond(carry) -> bool scalar Array, body(carry) -> carry.
// (Template parameters in the kernel language's order, so that this more constrained overload wins.)
template <class C, class CondFn, class BodyFn>
  requires(detail::is_array_tree<C>::value && std::is_invocable_v<const CondFn&, const C&>)
C while_loop(CondFn cond_fn, BodyFn body_fn, const C& init) {
  detail::FlatFn c = [cond_fn, init](const std::vector<Array>& in) {
    return std::vector<Array>{cond_fn(detail::tree_rebuild(in, init))};
  };
  detail::FlatFn b = [body_fn, init](const std::vector<Array>& in) {
    return detail::tree_flatten(C(body_fn(detail::tree_rebuild(in, init))));
  };
  return detail::tree_rebuild(detail::while_flat(c, b, detail::tree_flatten(init)), init);
}

// lax.cond(pred, true_fn, false_fn, operands...): both branches take the operands and return the
// same structure of Arrays with equal shapes and dtypes.
template <class TrueFn, class FalseFn, class... A>
auto cond(const Array& pred, TrueFn true_fn, FalseFn false_fn, const A&... operands) {
  using R = std::decay_t<std::invoke_result_t<const TrueFn&, const A&...>>;
  auto proto = std::make_tuple(operands...);
  std::shared_ptr<void> p1, p2;
  std::vector<Array> outs = detail::cond_flat(pred, detail::flat_fn(true_fn, proto, p1),
                                              detail::flat_fn(false_fn, proto, p2), detail::tree_flatten(proto));
  return detail::tree_rebuild(outs, *std::static_pointer_cast<R>(p1));
}

}  // namespace palladium
