// BlockSpec: which block of an input or output each program sees (Pallas's BlockSpec).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "palladium/ref.h"
#include "palladium/value.h"

namespace palladium {

// One entry of a block shape: a size, or pl::None for a squeezed dimension (size 1, dropped from
// the kernel's Ref; the index_map's entry for it is an element index).
struct BlockDim {
  int64_t size = 1;
  bool squeezed = false;
  BlockDim(NoneTag) : size(1), squeezed(true) {}  // NOLINT
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  BlockDim(I n) : size(static_cast<int64_t>(n)) {}  // NOLINT
};

namespace detail {
inline Indexer to_indexer(const Indexer& i) { return i; }
inline Indexer to_indexer(const Value& v) { return Indexer{IndexArg(v)}; }
template <class I>
  requires std::is_integral_v<I>
Indexer to_indexer(I v) { return Indexer{IndexArg(static_cast<int64_t>(v))}; }
inline Indexer to_indexer(const std::vector<Value>& v) {
  Indexer r;
  for (const Value& x : v) r.args.emplace_back(x);
  return r;
}
template <class... T> Indexer to_indexer(const std::tuple<T...>& t) {
  return std::apply([](const auto&... x) { return Indexer(std::vector<IndexArg>{IndexArg(x)...}); }, t);
}

inline constexpr int kMaxGridRank = 8;
template <class F, size_t... I>
Indexer call_index_map(const F& f, std::span<const Value> g, std::index_sequence<I...>) {
  return to_indexer(f(g[I]...));
}
template <class F, size_t N> constexpr bool invocable_with_n() {
  return []<size_t... I>(std::index_sequence<I...>) {
    return std::is_invocable_v<const F&, decltype((void)I, Value{})...>;
  }(std::make_index_sequence<N>{});
}
// Scalar prefetch: an index_map may also take the prefetched operands' Refs after the grid
// indices, as Pallas passes them (index_map(*grid_indices, *scalar_refs)).
inline constexpr size_t kMaxPrefetch = 4;
template <class F, size_t N, size_t K> constexpr bool invocable_with_refs() {
  return []<size_t... I, size_t... J>(std::index_sequence<I...>, std::index_sequence<J...>) {
    return std::is_invocable_v<const F&, decltype((void)I, Value{})..., decltype((void)J, Ref{})...>;
  }(std::make_index_sequence<N>{}, std::make_index_sequence<K>{});
}
// The scalar-prefetch Refs of the call being traced (empty outside one; set by pallas_call).
std::span<const Ref> scalar_prefetch_refs();
template <class F, size_t... I, size_t... J>
Indexer call_index_map_refs(const F& f, std::span<const Value> g, std::span<const Ref> r, std::index_sequence<I...>,
                            std::index_sequence<J...>) {
  return to_indexer(f(g[I]..., r[J]...));
}
}  // namespace detail

class BlockSpec {
 public:
  using MapFn = std::function<Indexer(std::span<const Value>)>;

  BlockSpec() = default;  // no spec: the whole array, for every program
  explicit BlockSpec(std::vector<BlockDim> block_shape) : shape_(std::move(block_shape)), has_shape_(true) {}
  template <class F>
  BlockSpec(std::vector<BlockDim> block_shape, F index_map) : shape_(std::move(block_shape)), has_shape_(true) {
    constexpr int k = prefetch_count<F>();
    prefetch_refs_ = k;
    if constexpr (k == 0) {
      arity_mask_ = arity_mask<F>(std::make_index_sequence<detail::kMaxGridRank + 1>{});
      map_ = [f = std::move(index_map)](std::span<const Value> g) -> Indexer {
        return dispatch(f, g, std::make_index_sequence<detail::kMaxGridRank + 1>{});
      };
    } else {  // it takes the scalar-prefetch Refs after the grid indices
      arity_mask_ = ref_arity_mask<F, k>(std::make_index_sequence<detail::kMaxGridRank + 1>{});
      map_ = [f = std::move(index_map)](std::span<const Value> g) -> Indexer {
        return dispatch_refs<F, prefetch_count<F>()>(f, g, detail::scalar_prefetch_refs(),
                                                    std::make_index_sequence<detail::kMaxGridRank + 1>{});
      };
    }
  }

  bool whole_array() const { return !has_shape_; }
  bool has_index_map() const { return static_cast<bool>(map_); }
  const std::vector<BlockDim>& block_shape() const { return shape_; }
  // Which grid ranks the index_map accepts (bit n: n indices).
  uint32_t arity_mask() const { return arity_mask_; }
  // How many scalar-prefetch Refs the index_map takes after the grid indices (0: none).
  int prefetch_refs() const { return prefetch_refs_; }
  const MapFn& index_map() const { return map_; }

  // Internal: build a spec from parts (used by vmap to compose index maps).
  static BlockSpec from_parts(std::vector<BlockDim> shape, MapFn map, uint32_t arity) {
    BlockSpec s(std::move(shape));
    s.map_ = std::move(map);
    s.arity_mask_ = arity;
    return s;
  }

 private:
  template <class F, size_t... N> static constexpr uint32_t arity_mask(std::index_sequence<N...>) {
    return ((detail::invocable_with_n<F, N>() ? (1u << N) : 0u) | ...);
  }
  template <class F, size_t K, size_t... N> static constexpr uint32_t ref_arity_mask(std::index_sequence<N...>) {
    return ((detail::invocable_with_refs<F, N, K>() ? (1u << N) : 0u) | ...);
  }
  // 0 when the index_map takes grid indices only, else the number of Refs it takes after them.
  template <class F> static constexpr int prefetch_count() {
    if (arity_mask<F>(std::make_index_sequence<detail::kMaxGridRank + 1>{}) != 0) return 0;
    int k = 0;
    [&]<size_t... K>(std::index_sequence<K...>) {
      ((k == 0 && ref_arity_mask<F, K + 1>(std::make_index_sequence<detail::kMaxGridRank + 1>{}) != 0 ? (void)(k = K + 1) : (void)0),
       ...);
    }(std::make_index_sequence<detail::kMaxPrefetch>{});
    return k;
  }
  template <class F, size_t K, size_t... N>
  static Indexer dispatch_refs(const F& f, std::span<const Value> g, std::span<const Ref> r, std::index_sequence<N...>) {
    Indexer out;
    bool done = false;
    (
        [&] {
          if constexpr (detail::invocable_with_refs<F, N, K>()) {
            if (!done && g.size() == N && r.size() == K) {
              out = detail::call_index_map_refs(f, g, r, std::make_index_sequence<N>{}, std::make_index_sequence<K>{});
              done = true;
            }
          }
        }(),
        ...);
    return out;  // the call checks the counts before dispatch
  }
  template <class F, size_t... N> static Indexer dispatch(const F& f, std::span<const Value> g, std::index_sequence<N...>) {
    Indexer out;
    bool done = false;
    (
        [&] {
          if constexpr (detail::invocable_with_n<F, N>()) {
            if (!done && g.size() == N) {
              out = detail::call_index_map(f, g, std::make_index_sequence<N>{});
              done = true;
            }
          }
        }(),
        ...);
    return out;  // arity is checked by the caller before dispatch
  }

  std::vector<BlockDim> shape_;
  bool has_shape_ = false;
  MapFn map_;
  uint32_t arity_mask_ = 0;
  int prefetch_refs_ = 0;
};

}  // namespace palladium
