// Structured control flow on traced values: fori_loop, while_loop, cond, when. The bodies are C++
// callables that run once, at trace time, to record the loop or branch (as in JAX); ordinary C++
// `if` and `for` on static values unroll at trace time instead.
//
// A carry is a Value, a std::tuple of Values, a std::array<Value, N> or a std::vector<Value>.
#pragma once
#include <array>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "palladium/value.h"

namespace palladium {

namespace detail {

template <class T> struct Carry;
template <> struct Carry<Value> {
  static void flatten(const Value& v, std::vector<Value>& out) { out.push_back(v); }
  static Value rebuild(const std::vector<Value>& in, size_t& pos, const Value&) { return in[pos++]; }
};
template <class... T> struct Carry<std::tuple<T...>> {
  static void flatten(const std::tuple<T...>& t, std::vector<Value>& out) {
    std::apply([&](const auto&... x) { (Carry<std::decay_t<decltype(x)>>::flatten(x, out), ...); }, t);
  }
  static std::tuple<T...> rebuild(const std::vector<Value>& in, size_t& pos, const std::tuple<T...>& proto) {
    return rebuild_impl(in, pos, proto, std::index_sequence_for<T...>{});
  }
  template <size_t... I>
  static std::tuple<T...> rebuild_impl(const std::vector<Value>& in, size_t& pos, const std::tuple<T...>& proto,
                                       std::index_sequence<I...>) {
    // Braced initialisation evaluates left to right, keeping `pos` in order.
    return std::tuple<T...>{Carry<T>::rebuild(in, pos, std::get<I>(proto))...};
  }
};
template <size_t N> struct Carry<std::array<Value, N>> {
  static void flatten(const std::array<Value, N>& a, std::vector<Value>& out) { out.insert(out.end(), a.begin(), a.end()); }
  static std::array<Value, N> rebuild(const std::vector<Value>& in, size_t& pos, const std::array<Value, N>&) {
    std::array<Value, N> a;
    for (auto& x : a) x = in[pos++];
    return a;
  }
};
template <> struct Carry<std::vector<Value>> {
  static void flatten(const std::vector<Value>& v, std::vector<Value>& out) { out.insert(out.end(), v.begin(), v.end()); }
  static std::vector<Value> rebuild(const std::vector<Value>& in, size_t& pos, const std::vector<Value>& proto) {
    std::vector<Value> v(in.begin() + static_cast<std::ptrdiff_t>(pos),
                         in.begin() + static_cast<std::ptrdiff_t>(pos + proto.size()));
    pos += proto.size();
    return v;
  }
};

template <class C> std::vector<Value> flatten(const C& c) {
  std::vector<Value> out;
  Carry<C>::flatten(c, out);
  return out;
}
template <class C> C rebuild(const std::vector<Value>& flat, const C& proto) {
  size_t pos = 0;
  return Carry<C>::rebuild(flat, pos, proto);
}

// Implemented in src/trace/control.cc. Each begin_* opens a region; the matching end_* closes it
// with the values it yields and emits the op once all its regions are closed.
std::vector<Value> begin_for(const Value& lo, const Value& hi, const std::vector<Value>& init, Value& index);
std::vector<Value> end_for(const std::vector<Value>& yielded);
std::vector<Value> begin_while(const std::vector<Value>& init);          // opens cond region
std::vector<Value> while_body(const Value& keep_going);                  // closes cond, opens body
std::vector<Value> end_while(const std::vector<Value>& yielded);
void begin_cond(const Value& pred);                                        // opens the true branch
void cond_else(const std::vector<Value>& yielded);                         // closes it, opens the false branch
std::vector<Value> end_cond(const std::vector<Value>& yielded);

}  // namespace detail

// lax.fori_loop(lo, hi, body, init): body(i, carry) -> carry, for i in [lo, hi).
template <class C, class Body>
  requires std::is_invocable_v<Body, Value, C>
C fori_loop(const Value& lo, const Value& hi, Body body, const C& init) {
  Value i;
  std::vector<Value> args = detail::begin_for(lo, hi, detail::flatten(init), i);
  C result = body(i, detail::rebuild(args, init));
  return detail::rebuild(detail::end_for(detail::flatten(result)), init);
}
// A loop without carries, for bodies that only load and store: body(i).
template <class Body>
  requires std::is_invocable_v<Body, Value>
void fori_loop(const Value& lo, const Value& hi, Body body) {
  Value i;
  detail::begin_for(lo, hi, {}, i);
  body(i);
  detail::end_for({});
}

// lax.while_loop(cond_fun, body_fun, init).
template <class C, class CondFn, class BodyFn>
C while_loop(CondFn cond_fun, BodyFn body_fun, const C& init) {
  std::vector<Value> args = detail::begin_while(detail::flatten(init));
  Value keep_going = cond_fun(detail::rebuild(args, init));
  args = detail::while_body(keep_going);
  C next = body_fun(detail::rebuild(args, init));
  return detail::rebuild(detail::end_while(detail::flatten(next)), init);
}

// lax.cond(pred, true_fun, false_fun): both branches return the same carry-like type (or nothing).
template <class TrueFn, class FalseFn>
auto cond(const Value& pred, TrueFn true_fun, FalseFn false_fun) {
  using R = std::invoke_result_t<TrueFn>;
  detail::begin_cond(pred);
  if constexpr (std::is_void_v<R>) {
    true_fun();
    detail::cond_else({});
    false_fun();
    detail::end_cond({});
  } else {
    R on_true = true_fun();
    detail::cond_else(detail::flatten(on_true));
    R on_false = false_fun();
    return detail::rebuild(detail::end_cond(detail::flatten(on_false)), on_true);
  }
}

// pl.when(pred)(fn): run fn only where pred holds.
template <class Fn> void when(const Value& pred, Fn fn) {
  cond(pred, fn, [] {});
}

namespace lax {
using palladium::cond;
using palladium::fori_loop;
using palladium::while_loop;
}  // namespace lax

}  // namespace palladium
