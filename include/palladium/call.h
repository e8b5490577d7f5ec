// pallas_call: lift a kernel over Refs into a callable on Arrays, run once per point of a grid.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "palladium/array.h"
#include "palladium/ref.h"
#include "palladium/spec.h"

namespace palladium {

// Hints for compiled backends; the interpreter ignores them.
struct CompilerParams {
  int num_warps = 0;       // CUDA: threads per program / 32 (0: chosen by the backend)
  int num_stages = 0;      // CUDA: pipelining depth hint
  bool allow_tf32 = false; // CUDA: float32 dot on TF32 tensor cores
  bool fast_math = false;  // CUDA: float32 exp/exp2/log/log2/logistic on the special-function
                           // unit and division by div.full (a few ulps, as Triton's); the
                           // interpreter and cpu stay exact
  // cpu, CUDA: a checked run. Every ref access is bounds-checked and the first fault is an error
  // worded as the interpreter's (kernel, program, op, index). Also on with $PALLADIUM_CHECKS=1.
  bool checks = false;
};

// How the programs along one grid axis may run (Pallas's dimension_semantics). `parallel`: in any
// order and at once, so no two programs may write one element. `arbitrary`: in grid order, one
// after another, for each point of the parallel axes; programs that differ only along arbitrary
// axes may read and update what the earlier ones wrote (an output block accumulated along a
// reduction axis, initialised under `when(program_id(k) == 0)`).
enum class DimensionSemantics { parallel, arbitrary };
inline constexpr DimensionSemantics parallel = DimensionSemantics::parallel;
inline constexpr DimensionSemantics arbitrary = DimensionSemantics::arbitrary;

struct CallOptions {
  Shape grid;                                       // empty: one program
  std::vector<DimensionSemantics> dimension_semantics;  // one per grid axis; empty: all parallel
  // Pallas's PrefetchScalarGridSpec: the first num_scalar_prefetch inputs are whole integer arrays
  // that every index_map receives as Refs after the grid indices (index_map(i, j, lengths_ref))
  // and the kernel receives first; in_specs then covers the other inputs only.
  int num_scalar_prefetch = 0;
  std::vector<BlockSpec> in_specs;                  // empty: whole arrays
  std::vector<BlockSpec> out_specs;
  std::vector<std::pair<int, int>> input_output_aliases;  // (input index, output index)
  // Pallas's scratch_shapes: per-program buffers the kernel receives after its outputs, as Refs.
  // Uninitialised; kept across the programs of one chain along sequential (arbitrary) axes, so
  // they can carry an accumulator through a reduction axis. They live in device memory.
  std::vector<ShapeDtype> scratch_shapes;
  std::string name;                                 // default: "kernel"
  bool debug = false;                               // print the traced IR (and generated code)
  std::string backend;                              // "", "interpret", "cpu", "cuda"; "" = default
  bool interpret = false;                           // shorthand for backend = "interpret"
  CompilerParams compiler_params{};
};

namespace detail {

// A kernel callable, erased to one signature: it receives the refs of the inputs then the outputs.
// An arity mask with every bit set: a callable that takes any number of arguments (a kernel over a
// pl::Refs span, an index_map that ignores the grid).
inline constexpr uint32_t kAnyArity = ~0u;

struct KernelFn {
  std::function<void(Refs)> fn;
  uint32_t arity_mask = 0;  // bit n: takes n Refs; kAnyArity: takes a pl::Refs span
};
inline constexpr int kMaxRefs = 24;

template <class F, size_t N> constexpr bool invocable_with_refs() {
  return []<size_t... I>(std::index_sequence<I...>) {
    return std::is_invocable_v<F&, decltype((void)I, Ref{})...>;
  }(std::make_index_sequence<N>{});
}

template <class F> KernelFn make_kernel_fn(F f) {
  if constexpr (std::is_invocable_v<F&, Refs>) {
    return {[f = std::move(f)](Refs r) mutable { f(r); }, kAnyArity};
  } else {
    uint32_t mask = []<size_t... N>(std::index_sequence<N...>) {
      return ((invocable_with_refs<F, N>() ? (1u << N) : 0u) | ...);
    }(std::make_index_sequence<kMaxRefs + 1>{});
    auto call = [f = std::move(f)](Refs r) mutable {
      [&]<size_t... N>(std::index_sequence<N...>) {
        (
            [&] {
              if constexpr (invocable_with_refs<F, N>()) {
                if (r.size() == N) [&]<size_t... I>(std::index_sequence<I...>) { f(r[I]...); }(std::make_index_sequence<N>{});
              }
            }(),
            ...);
      }(std::make_index_sequence<kMaxRefs + 1>{});
    };
    return {std::move(call), mask};
  }
}

class CallImpl;
std::shared_ptr<CallImpl> make_call(KernelFn kernel, std::vector<ShapeDtype> out_shapes, CallOptions options);
std::shared_ptr<CallImpl> make_vmap(std::shared_ptr<CallImpl> inner, std::vector<std::optional<int64_t>> in_axes);
std::vector<Array> invoke(const CallImpl& call, const std::vector<Array>& inputs);
// Runs the call, or binds it as a pallas_call primitive while a program is traced (jit, grad, ...).
std::vector<Array> call_or_bind(const std::shared_ptr<CallImpl>& call, const std::vector<Array>& inputs);
std::string lower(const CallImpl& call, const std::vector<ShapeDtype>& inputs);  // IR text
int trace_count(const CallImpl& call);
// A choice among candidate calls (autotune); the label of the one chosen for these inputs (timing
// the candidates first if no choice is known for their signature and device).
std::shared_ptr<CallImpl> make_choice(std::string name, std::vector<std::string> labels,
                                      std::vector<std::shared_ptr<CallImpl>> candidates);
std::string chosen_label(const CallImpl& call, const std::vector<Array>& inputs);

}  // namespace detail

// The backend a call without .backend runs on: $PALLADIUM_BACKEND, else the fastest available here.
std::string default_backend();
// The backends that can run on this machine ("interpret" always; "cpu", "cuda" when usable).
std::vector<std::string> available_backends();

// vmap's in_axes entry: the batched axis of an input, or pl::None for an unbatched input.
struct InAxis {
  std::optional<int64_t> axis;
  InAxis(NoneTag) {}  // NOLINT
  template <class I>
    requires std::is_integral_v<I>
  InAxis(I a) : axis(static_cast<int64_t>(a)) {}  // NOLINT
};

// R is Array for a call with one output and std::vector<Array> for several.
template <class R> class Callable {
 public:
  explicit Callable(std::shared_ptr<detail::CallImpl> impl) : impl_(std::move(impl)) {}

  template <class... A> R operator()(const A&... inputs) const { return call(std::vector<Array>{Array(inputs)...}); }
  R call(const std::vector<Array>& inputs) const {
    std::vector<Array> outs = detail::call_or_bind(impl_, inputs);
    if constexpr (std::is_same_v<R, Array>) return outs.at(0);
    else return outs;
  }
  // The IR the call traces for inputs of these shapes and dtypes.
  std::string lower(const std::vector<ShapeDtype>& inputs) const { return detail::lower(*impl_, inputs); }
  int trace_count() const { return detail::trace_count(*impl_); }
  const std::shared_ptr<detail::CallImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<detail::CallImpl> impl_;
};

template <class K> Callable<Array> pallas_call(K kernel, ShapeDtype out_shape, CallOptions options = {}) {
  return Callable<Array>(detail::make_call(detail::make_kernel_fn(std::move(kernel)), {std::move(out_shape)},
                                           std::move(options)));
}
template <class K>
Callable<std::vector<Array>> pallas_call(K kernel, std::vector<ShapeDtype> out_shapes, CallOptions options = {}) {
  return Callable<std::vector<Array>>(
      detail::make_call(detail::make_kernel_fn(std::move(kernel)), std::move(out_shapes), std::move(options)));
}

// jax.vmap of a pallas_call: a new leading grid axis over the batch, and the batch dimension
// squeezed out of every BlockSpec (Pallas's batching rule). in_axes: one entry per input
// (default: every input batched along axis 0); outputs are batched along axis 0.
template <class R> Callable<R> vmap(const Callable<R>& f, std::vector<InAxis> in_axes = {}) {
  std::vector<std::optional<int64_t>> axes;
  for (const InAxis& a : in_axes) axes.push_back(a.axis);
  return Callable<R>(detail::make_vmap(f.impl(), std::move(axes)));
}

// Triton's autotune for pallas_calls: candidates that compute the same function in different ways
// (block shapes, warps, stages), each with a label. The first call with a new input signature (shapes
// and dtypes) on a device times every candidate on its inputs and keeps the fastest, remembered
// for the process and in the disk cache (PALLADIUM_CACHE_DIR, under autotune/); a candidate that
// fails to compile or run is skipped. Later calls, and jitted programs (tuned at their first run),
// call the winner. vmap tunes the batched candidates. PALLADIUM_AUTOTUNE=0 takes the first candidate
// without timing. Errors: no candidates, two with one label, candidates whose outputs differ in shape
// or dtype, and every candidate failing (each one's error is listed).
template <class R>
Callable<R> autotune(std::string name, std::vector<std::pair<std::string, Callable<R>>> candidates) {
  std::vector<std::string> labels;
  std::vector<std::shared_ptr<detail::CallImpl>> calls;
  for (auto& [label, c] : candidates) {
    labels.push_back(label);
    calls.push_back(c.impl());
  }
  return Callable<R>(detail::make_choice(std::move(name), std::move(labels), std::move(calls)));
}
// The label of the candidate `f` (an autotune) runs for these inputs, tuning first where needed.
template <class R> std::string autotune_choice(const Callable<R>& f, const std::vector<Array>& inputs) {
  return detail::chosen_label(*f.impl(), inputs);
}

}  // namespace palladium
