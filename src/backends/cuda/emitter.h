// The CUDA emitter's shared state. A kernel is lowered in two steps:
//  1. plan (layout_plan.cc): threads per block, and a layout for every tile shape. A layout says
//     which thread holds which element in registers ("slots"), or that the tile is too large for
//     registers and lives in global scratch memory ("Memory"). Every value of one shape has the
//     one layout, so elementwise ops never move data between threads.
//  2. emit (emit_*.cc): one C++ statement group per IR instruction. Ops that move elements between
//     threads (broadcast, transpose, reductions, dot, ...) go through a staging buffer in shared
//     memory (global scratch when too large) between two barriers, except for the register-local
//     fast paths named in each emitter.
// Control flow is uniform across the block (predicates and bounds are scalars every thread
// computes alike), so barriers may sit inside loops and branches.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/codegen.h"
#include "ir/ir.h"

namespace palladium::cuda {

enum class LayoutKind {
  Replicated,  // one element (rank 0 or all dims 1): every thread holds it
  Strided,     // groups of `vec` consecutive elements dealt round-robin to threads
  Mma,         // rank 2 [M, N]: the mma.sync m16n8 accumulator layout over a warps_m x warps_n grid
  RowSlice,    // [M] or [M, 1]: the rows of an Mma layout with warps_n == 1 (each quad holds its rows)
  Memory,      // too large for registers: row-major in global scratch, threads stride over elements
};

struct Layout {
  int id = 0;
  LayoutKind kind = LayoutKind::Strided;
  Shape shape;
  int64_t numel = 1;
  int slots = 1;             // register slots per thread (Memory: 0)
  int vec = 1;               // Strided: consecutive elements per group
  int warps_m = 1, warps_n = 1, tiles_m = 1, tiles_n = 1;  // Mma / RowSlice
  bool all_slots_valid = true;  // Strided: false when the threads' slots overhang numel
  bool replicated = false;      // several threads hold each element (Replicated, RowSlice)
  bool registers() const { return kind != LayoutKind::Memory; }
};

// A shared-memory tile holding a 16-bit dot operand in its natural row-major form, rows padded by
// 8 elements (16 bytes) so that ldmatrix row addresses fall in distinct banks.
// Or, for wgmma operands, "swizzled" (device/cuda/pl_wgmma.h): 128-byte-swizzled 8-row atoms in
// 64-column blocks, no padding.
struct SmemTile {
  int64_t offset = 0;        // bytes into dynamic shared memory
  int64_t rows = 0, cols = 0;
  bool swizzled = false;
  int64_t row_stride() const { return cols + 8; }  // padded format, in elements
  int64_t bytes() const { return swizzled ? rows * cols * 2 : rows * row_stride() * 2; }
};

// Shared memory kept free of planned tiles: static __shared__ variables of the generated kernel.
inline constexpr int64_t kSharedReserve = 1024;
// Shared memory that the homes leave to the exchange area (values staged between threads).
inline constexpr int64_t kExchangeHeadroom = 8 * 1024;

// Elementwise op families that index arithmetic is made of (with the leaves each analysis allows).
inline bool is_index_arith(ir::Op op) {
  const ir::Family f = ir::op_family(op);
  return f == ir::Family::Unary || f == ir::Family::Binary || f == ir::Family::Compare || f == ir::Family::Select ||
         f == ir::Family::Cast;
}

// The dtypes of the tensor cores' 16-bit operands (and of shared-memory homes).
inline bool is_16bit_float(DType t) { return t == DType::float16 || t == DType::bfloat16; }
// The device function packing two floats into a 16-bit pair of `t` (one cvt.rn.*x2.f32).
inline std::string pack_function(DType t) { return t == DType::bfloat16 ? "pl_pack_bf16" : "pl_pack_f16"; }

// The array dimension, index stride and gather flag of each dimension of a load's value (its
// index entries that are not scalars, squeezed array dimensions skipped).
struct ValueDim {
  size_t array_dim = 0;
  int64_t stride = 1;
  bool gather = false;
};
std::vector<ValueDim> value_dims(const ir::Inst& in, const ir::RefParam& p);

// PALLADIUM_CUDA_TRANSPOSED_PRODUCTS=1: the transposed products and their column loads (emit_kernel.cc).
bool transposed_products_on();

class Emitter {
 public:
  Emitter(const ir::Kernel& k, const CompilerParams& params, const Target& target);
  GeneratedKernel run();

  // ---- plan (layout_plan.cc) ----
  void plan();
  void find_written_refs();
  void find_prefetches(const std::vector<std::pair<ir::ValueId, bool>>& homes);
  void choose_stages(std::vector<std::pair<ir::ValueId, bool>>& homes);  // and the pipelined loops
  const Layout& layout_of(ir::ValueId v) const;
  const Layout& layout_for_shape(const Shape& s) const;

  // ---- helpers shared by the emitters (emit_kernel.cc) ----
  std::string name(ir::ValueId v) const;
  const ir::Type& type(ir::ValueId v) const { return k_.type(v); }
  static std::string reg_type(DType t);      // register type: float for the 16-bit floats
  static std::string mem_type(DType t);      // element type in device memory
  static int reg_size(DType t);
  void line(const std::string& s);           // one line at the current indentation
  void open(const std::string& s);           // "s {" and indent
  void close(const std::string& s = "}");
  void declare(ir::ValueId v);               // storage for v (registers or a scratch buffer)
  // Opens a loop over the slots of `l` with the slot index in `s` ("}" closes it).
  void open_slots(const Layout& l);
  std::string at(ir::ValueId v) const;       // v's element in the current slot loop: "v12[s]"
  std::string elem(const Layout& l) const;   // flat element index of slot s
  std::string coord(const Layout& l, size_t dim) const;  // coordinate along `dim` of slot s
  std::string valid(const Layout& l) const;  // "" when every slot is valid, else a condition
  std::string owner(const Layout& l) const;  // condition: this slot's thread writes the element
  void barrier();
  // Checked runs: thread 0 records the access's first element outside its ref (or its block
  // outside the array); the access itself then proceeds, clipped to the array.
  void emit_access_check(const ir::Inst& in);
  // Storage expression for a scratch byte offset in global memory.
  std::string scratch_ptr(int64_t offset, const std::string& type) const;
  // Staging: returns a pointer expression to `bytes` of exchange space (shared or global).
  std::string stage_space(int64_t bytes, const std::string& type, int64_t offset = 0);
  // Writes every element of v (registers) into a row-major buffer; returns the buffer expression.
  // For Memory values, the value's own buffer. Caller emits the barrier.
  std::string stage_value(ir::ValueId v, int64_t offset = 0);
  int64_t staged_bytes(ir::ValueId v) const;
  std::string literal(DType t, double f, int64_t i) const;
  std::string round_fn(DType t) const;       // "pl_round_bf16" or ""
  [[noreturn]] void unsupported(const ir::Inst& in, const std::string& why) const;
  int uses(ir::ValueId v) const;
  const std::vector<const ir::Inst*>& users(ir::ValueId v) const;  // the instructions reading v

  // ---- per-family emitters ----
  void emit_region(const ir::Region& r);
  void emit_region_body(const ir::Region& r);
  // Whether a barrier has been emitted in the innermost region being emitted, before this point:
  // on every path through it (regions nested in it do not count).
  bool barrier_in_body_ = false;
  void emit_inst(const ir::Inst& in);
  // wgmma dots committed but not yet waited for: the instructions after a dot that neither read
  // its result nor touch shared memory are emitted before its wait (emit_kernel.cc).
  std::set<ir::ValueId> dots_in_flight_;
  // The same dots by commit group, oldest first: a read of one waits for it and the groups before
  // it (wgmma.wait_group N, N the groups after it), the later ones stay in flight.
  std::vector<std::set<ir::ValueId>> dot_groups_;
  bool touched_shared_ = false;  // set by whatever emits a barrier or a shared-memory access
  void emit_inst_beside_dots(const ir::Inst& in);
  void emit_ahead_of_wait(const ir::Region& r, const ir::Inst& in);
  std::set<const ir::Inst*> emitted_early_;  // emitted ahead of their place, while a dot ran
  void retire_dots();
  void retire_dots_read_by(const ir::Inst& in);
  void retire_oldest_dot_groups(size_t count);
  void emit_inst_body(const ir::Inst& in);
  void emit_leaf(const ir::Inst& in);                 // emit_elementwise.cc
  void emit_elementwise(const ir::Inst& in);
  std::string elementwise_expr(const ir::Inst& in, const std::vector<std::string>& operands) const;
  // The softmax step folded (emit_elementwise.cc): a float32 value's constant factor, where it is
  // v = x * c with c a finite constant (nullopt otherwise; `x` receives the other operand).
  std::optional<double> constant_factor(ir::ValueId v, ir::ValueId* x) const;
  // v as x * c for its readers: a multiply by a constant (x its other operand), or a lazily scaled
  // select (lazy_scale.cc: x is v itself, whose registers hold v / c where `flag` holds).
  struct Scaled {
    ir::ValueId x;
    double c;
    std::string flag;         // "" where c always applies
    bool exp2_rows = false;   // a flagged exp takes the exp2 form, its factors chosen once a row
  };
  std::optional<Scaled> scaled_value(ir::ValueId v) const;
  std::string scaled_by(const Scaled& s, const std::string& v) const;  // v * c, or flag ? v * c : v
  // exp(a - b) of float32 registers with fast_math, the form the fold reads: a and b, or nullopt.
  std::optional<std::pair<ir::ValueId, ir::ValueId>> exp_of_difference(const ir::Inst& in) const;
  // A row reduction of an mma accumulator, done by the quad's shuffles (emit_reduce).
  bool mma_row_reduce(const ir::Inst& in) const;
  struct ScaledExp {  // exp(x * c - b)
    Scaled a;
    ir::ValueId b;
  };
  std::optional<ScaledExp> scaled_exp(const ir::Inst& in) const;
  void emit_scaled_exp(const ir::Inst& in, const ScaledExp& f);
  // The element of v at `coords` (C++ text) as an expression, when v is cheap index arithmetic
  // (iota, constants, scalars, elementwise ops, reshapes and broadcasts of such); "" otherwise.
  std::string recompute(ir::ValueId v, const std::vector<std::string>& coords, int& budget) const;
  static constexpr int kRecomputeBudget = 32;  // nodes recompute may visit for a select's predicate
  // Selects decided per block (uniform_select.cc): the range of an index value, and when a
  // predicate holds everywhere or nowhere, as expressions over scalars in scope.
  struct IndexRange {
    std::string lo, hi, ok;  // ok: no element's arithmetic wrapped in its dtype
  };
  struct UniformTest {
    std::string all_true, all_false;
  };
  std::optional<IndexRange> index_range(ir::ValueId v) const;
  std::optional<UniformTest> uniform_test(ir::ValueId pred) const;
  void find_uniform_selects();
  bool deferred(const ir::Inst& in) const;  // computed inside a uniform select's mixed branch instead
  void emit_uniform_select(const ir::Inst& in);
  std::set<const ir::Inst*> uniform_selects_;
  // Uniform selects of x * c (c > 0) read only by row maxima and the softmax's exp (lazy_scale.cc):
  // held as x, unscaled, in blocks where the predicate holds throughout (`flag`).
  struct LazyScale {
    ir::ValueId unscaled;
    double c;
    std::string flag;
    bool exp2_rows;  // see emit_scaled_exp
  };
  std::map<ir::ValueId, LazyScale> lazy_scaled_;
  std::set<const ir::Inst*> lazy_muls_;  // their x * c, computed in the mixed branch only
  void find_lazy_scales();
  std::set<ir::ValueId> deferred_index_;
  // The slot of the row vector that slot `s` of a RowSlice -> Mma broadcast reads (C++ text over
  // s), or "" where the broadcast is not of that form.
  std::string mma_row_slot(const ir::Inst& broadcast) const;
  // The registers a thread that the tensor-core dots in `region` (nested ones too) accumulate in.
  int64_t accumulator_slots(const ir::Region& region) const;
  void emit_broadcast(const ir::Inst& in);            // emit_layout_ops.cc
  void emit_reshape(const ir::Inst& in);
  void emit_transpose(const ir::Inst& in);
  void emit_reduce(const ir::Inst& in);
  void emit_cumsum(const ir::Inst& in);
  void emit_debug_print(const ir::Inst& in);
  void emit_gather(ir::ValueId result, ir::ValueId source, const std::vector<std::string>& src_coord);
  void emit_memory(const ir::Inst& in);               // emit_memory.cc
  // An unmasked load or store (outside loops) of a strided value whose groups run along the
  // array's innermost dimension, as 4- to 16-byte accesses (element by element at edges and
  // misaligned addresses); false where it does not apply.
  bool emit_vector_memory(const ir::Inst& in, const Layout& l, ir::ValueId value);
  // A broadcast into an mma tile of a vector loaded from an input the kernel never writes (through
  // a reshape to [1, n] or [n, 1]) whose layout would need an exchange: each thread loads the
  // elements it needs again instead (emit_memory.cc; the transposed attention backward's lse and
  // delta by key column). The reshape is then not emitted. Only with PALLADIUM_CUDA_TRANSPOSED_PRODUCTS=1.
  const ir::Inst* reloaded_vector(const ir::Inst& broadcast) const;
  void emit_reloaded_broadcast(const ir::Inst& broadcast, const ir::Inst& load);
  static bool quad_stores_enabled();
  void emit_quad_store(const ir::Inst& in, const Layout& l, ir::ValueId stored);  // 16-bit mma tile, 16 bytes a thread
  // A quiet float32 atomic add of an mma accumulator on sm_90: red.global.add.v2.f32 by pairs.
  bool paired_reduction(const ir::Inst& in) const;
  bool bulk_reduction(const ir::Inst& in) const;  // PALLADIUM_CUDA_BULK_REDUCE=1 and a tile it can take
  void emit_bulk_reduction(const ir::Inst& in, const Layout& l, ir::ValueId value);
  // Inside emit_vector_memory: a paired reduction's tile tested once for bounds and alignment.
  void emit_whole_tile_reduction(const ir::Inst& in, const Layout& l, ir::ValueId value);
  // An atomic add, max, min or bitwise update whose old values nobody reads: such updates commute.
  bool quiet_update(const ir::Inst& in) const;
  void emit_smem_load(const ir::Inst& in, const SmemTile& tile);
  void emit_dot(const ir::Inst& in);                  // emit_dot.cc
  // A tensor-core dot's accumulators: in place in its addend's registers where the add is the
  // addend's only use (at the dot's loop depth, so no later iteration reads it again), else a
  // copy of the addend, or zeros.
  void init_accumulator(const ir::Inst& dot);
  // Dots on Hopper's warpgroup MMA (emit_wgmma.cc): chosen in planning, their operand homes swizzled.
  std::set<const ir::Inst*> wgmma_dots_;
  std::set<std::string> wgmma_variants_;              // instruction wrappers the kernel needs
  std::set<ir::ValueId> swizzled_homes_;
  bool wgmma_candidate(const ir::Inst& dot) const;    // shape, dtype and target allow it
  void choose_wgmma(std::vector<std::pair<ir::ValueId, bool>>& homes);
  // The accumulator set-up, the issue, one commit group and its wait (<1> when `retire_later`:
  // the group before it, not this one, must be complete).
  void emit_wgmma(const ir::Inst& in, ir::ValueId a, ir::ValueId b, bool ta, bool tb, bool retire_later = false);
  void emit_wgmma_issue(const ir::Inst& in, ir::ValueId a, ir::ValueId b, bool ta, bool tb);  // fence + MMAs
  // Software-pipelined loops (dot_pipeline.cc).
  struct PipelinedLoop {
    const ir::Inst* loop = nullptr;
    const ir::Inst* first_dot = nullptr;     // issued one iteration ahead (none in a K loop)
    const ir::Inst* last_dot = nullptr;      // retired where its carry is next read
    const ir::Inst* carry_reader = nullptr;  // the carry's only reader; computes in place (or none)
    ir::ValueId carry_arg = -1;
  };
  std::map<const ir::Inst*, PipelinedLoop> pipelined_;              // by loop
  std::map<const ir::Inst*, const PipelinedLoop*> pipelined_by_dot_;  // first and last dots
  std::set<ir::ValueId> in_place_;        // results written into their carry's registers
  std::map<ir::ValueId, std::string> home_override_;  // home_expr for another iteration's tiles
  void find_pipelined_loops();
  void emit_pipeline_prologue(const PipelinedLoop& p);
  void emit_first_dot_issue(const PipelinedLoop& p, const std::string& iteration);
  void emit_pipeline_next_issue(const PipelinedLoop& p);
  const PipelinedLoop* pipelined_loop(const ir::Inst& loop) const {
    auto it = pipelined_.find(&loop);
    return it == pipelined_.end() ? nullptr : &it->second;
  }
  std::string wgmma_functions() const;
  std::string home_element(ir::ValueId v, const std::string& r, const std::string& c) const;  // lvalue
  void emit_home_store(ir::ValueId v);
  void emit_control(const ir::Inst& in);              // emit_kernel.cc

  // ---- analysis shared with emitters ----
  // Dot operands that live in a shared-memory tile (loads used only by dots, and loop-invariant
  // operands staged once); keyed by value.
  std::map<ir::ValueId, SmemTile> smem_home;
  std::set<ir::ValueId> skip_registers;  // values that exist only in their smem home
  // Loads in a loop body whose tile is prefetched: TMA (emit_tma.cc) or cp.async copies into a
  // ring of stages_ buffers, prefetch_distance() iterations ahead. The loop, and the scalar
  // instructions computing the load's indices, re-emitted for the iteration prefetched.
  struct Prefetch {
    const ir::Inst* loop = nullptr;
    std::vector<const ir::Inst*> slice;
  };
  std::map<ir::ValueId, Prefetch> prefetch;
  std::string home_expr(ir::ValueId v) const;  // pointer to v's home (this iteration's buffer)
  // The copy of a load's tile into shared memory at `dst` (no waits, no barrier).
  void emit_home_fill(const ir::Inst& load, const SmemTile& tile, const std::string& dst);
  // Issues the cp.async copies of `load` for loop index `index` (C++ text) into buffer `dst`.
  void emit_prefetch_issue(const ir::Inst& load, const std::string& index, const std::string& dst);
  // How many iterations ahead a loop's loads are prefetched: stages_ - 1 (every buffer of the ring
  // but the one being read); stages_ - 2 in a pipelined loop, whose previous iteration's buffer is
  // still read by its dot in flight.
  int prefetch_distance(const ir::Inst& loop) const;
  // One prefetch round: the loop's prefetched loads for iteration `iteration` (C++ text, bound to
  // the variable `var`) when it is below the loop's end: its TMA copies after thread 0's arrival
  // on the slot's barrier, its other loads' cp.async copies as one group (committed, empty past
  // the end, so that every iteration commits one, unless the ring has none).
  // In a split ring, `group` names the half of the round (its loads, bytes and barrier).
  void emit_prefetch_round(const ir::Inst& loop, const std::string& var, const std::string& iteration, int group = -1);
  // Waits for the round of loop index `iteration` (C++ text; rounds are awaited in iteration
  // order) and makes its tiles visible (to every thread, and to wgmma); in a split ring, for one group's.
  void emit_prefetch_wait(const ir::Inst& loop, const std::string& iteration, int group = -1);
  // TMA (emit_tma.cc): prefetched swizzled homes brought in by the tensor memory accelerator, one
  // thread issuing each round's copies, which complete on the ring slot's mbarrier.
  struct TmaLoad {
    int map = 0;  // index into tensor_maps_ (the kernel parameter pl_tmap<map>)
  };
  struct TmaRing {
    int index = 0;            // its slot count pl_base<index> (served by the producer)
    int64_t bytes = 0;        // what a round's copies deliver
    bool cp_async = false;    // the round also has loads copied by cp.async
    // A software-pipelined attention loop served by the producer splits its round in two groups,
    // each completing and going back on barriers of its own: the first dot's tiles (group 0) and
    // the rest (group 1), so that K's slot is refilled while V's is still read (emit_producer.cc).
    bool split = false;
    int64_t group_bytes[2] = {0, 0};
    // Its barrier sets (one per group): pl_full<set>[stages_], pl_phase<set>, pl_empty<set>[stages_].
    int first_set = 0;
  };
  std::map<ir::ValueId, TmaLoad> tma_loads_;
  // Homes loaded once at the kernel's top level through the TMA: the copy is issued where the
  // load stands and awaited (its own barrier pl_home_bar<index>, parity pl_home_phase) by the
  // dots reading it, so the loops' first rounds go out while it is in flight.
  std::map<ir::ValueId, int> tma_homes_;
  std::set<ir::ValueId> tma_homes_waited_;  // awaited before a top-level loop reading them
  void emit_tma_home_waits(const ir::Inst& loop);
  // Homes the producer loads (emit_producer.cc, choose_producer_homes): each program's copy goes
  // out from the producer once the consumers gave back the previous program's home, on
  // pl_home_empty<index>, after the last top-level instruction reading it (home_releases_), or
  // inside it where a pipelined loop reads it only through its first dot (early_home_releases); the
  // waits on pl_home_bar<index> take the parity pl_home_phase, a program count's low bit. This is
  // what lets such a kernel (the attention forward, its q block a home) run persistently.
  bool producer_homes_ = false;
  std::vector<const ir::Inst*> home_loads_;                           // top-level loads, by home index
  std::map<const ir::Inst*, std::vector<int>> home_releases_;         // top-level inst -> homes freed after it
  void choose_producer_homes(const std::set<ir::ValueId>& known);
  bool reads_value(const ir::Inst& in, ir::ValueId v, const ir::Inst* skip = nullptr) const;
  bool runs_alike(const ir::Inst& loop) const;  // its bounds are free of program ids
  bool persistent_eligible() const;             // a producer kernel whose programs may share a block
  int64_t balance_length() const;               // GeneratedKernel::balance_length
  std::optional<std::vector<const ir::Inst*>> ring_loops_along_fastest() const;
  void emit_producer_homes();                  // in the producer's program, before its rounds
  void emit_home_release(const ir::Inst& in);  // in the consumers', after a top-level instruction
  // Homes that a split pipelined loop reads only through its first dot go back once the last
  // first dot is retired (emit_producer.cc): where the loop runs two or more iterations at the
  // end of iteration hi - 2, one iteration at the prologue, none after the loop.
  std::vector<int> early_home_releases(const ir::Inst& loop) const;
  void emit_early_home_release(const ir::Inst& loop, const std::string& condition);
  std::map<const ir::Inst*, TmaRing> tma_rings_;  // by loop
  // Who issues a loop's prefetch rounds, and where (choose_tma, choose_producer):
  //  AtLoads       thread 0 at the iteration's first prefetched load, past the wait's barrier;
  //  AfterLastDot  thread 0 once the iteration's dot is committed (a pipelined K loop whose rounds
  //                are all TMA copies: the tensor cores are busy before warp 0 issues copies);
  //  Producer      the producer warp, a whole ring ahead (emit_producer.cc).
  enum class RoundIssue { AtLoads, AfterLastDot, Producer };
  std::map<const ir::Inst*, RoundIssue> round_issue_;  // loops absent issue AtLoads
  RoundIssue round_issue(const ir::Inst& loop) const {
    auto it = round_issue_.find(&loop);
    return it == round_issue_.end() ? RoundIssue::AtLoads : it->second;
  }
  bool producer_serves(const ir::Inst& loop) const { return round_issue(loop) == RoundIssue::Producer; }
  std::vector<TensorMapSpec> tensor_maps_;
  // Warp specialisation (emit_producer.cc): an extra producer warp (or warpgroup), after the consumer warps,
  // issues every round of the loops it serves, running ahead of the consumers by a whole ring;
  // the consumers wait on the slots' full barriers, give each slot back on its empty barrier
  // pl_empty<ring>[s] once the dots reading it are retired, and synchronise among themselves on
  // a named barrier. threads_ stays the consumers' count.
  int producer_warps_ = 0;
  // Register rebalancing (setmaxnreg): where the producer is a whole warpgroup, it drops to
  // producer_regs_ and the consumers rise to consumer_regs_ (0: no rebalancing, one producer warp).
  int producer_regs_ = 0, consumer_regs_ = 0;
  std::vector<const ir::Inst*> producer_scalars_;  // top-level scalars the producer recomputes
  std::string tma_issuer_ = "pl_tid() == 0";       // the condition under which copies are issued
  bool uniform_addresses() const;  // shared offsets and pl_wg_top (emit_kernel.cc)
  void choose_producer();                          // assign_producer, then the rings' split
  void assign_producer();                          // which loops the producer serves
  std::string producer_code();                     // the producer's body ("" without one)
  void emit_consumer_release(const ir::Inst& loop);  // at the end of an iteration
  void emit_consumer_loop_end(const ir::Inst& loop);  // after the loop
  // Each consumer warp gives `group`'s slot of loop index `iteration` back to the producer.
  void emit_slot_release(const ir::Inst& loop, int group, const std::string& iteration);
  void split_served_rings();  // the served attention loops' rings, and the barrier sets
  void drop_short_pipelines();  // two-stage pipelined loops that no producer serves
  void drop_pipeline(const ir::Inst& loop);
  bool pingpong_possible(const ir::Inst& loop) const;
  // Ping-pong (emit_producer.cc): served loops whose two consumer warpgroups take turns at the
  // tensor cores (the software-pipelined ones, and the two-stage loops left unpipelined because
  // their bounds differ between programs; every two-stage loop unpipelined with
  // PALLADIUM_CUDA_PINGPONG=1), and the wgmma dots in their bodies that begin or end a turn.
  // Unpipelined: the first dot (q k^T) ends a turn, the last (p v) begins one. Pipelined: a turn
  // is the issue of the next iteration's first dot and this one's last (EndsPipelined: the last).
  enum class Turn { EndsOne, BeginsOne, EndsPipelined };
  struct TurnDot {
    const ir::Inst* loop = nullptr;
    Turn turn = Turn::EndsOne;
  };
  std::set<const ir::Inst*> pingpong_loops_;
  std::map<const ir::Inst*, TurnDot> turn_dots_;
  void emit_turns_open(const ir::Inst& loop);   // before the loop
  void emit_turns_close(const ir::Inst& loop);  // after it
  void emit_turn_wait(const ir::Inst& dot);     // before a dot's issue, where a turn begins
  void emit_turn_pass(const ir::Inst& dot);     // after it, where one ends
  bool pipelined_turns(const PipelinedLoop& p) const;  // does p's loop take turns?
  // The programs' walk (program_order.cc): pl_pid<d> from the linear block index, the parallel
  // axes outermost first, and the grid axes a value's program ids come from.
  // reverse_fastest: the fastest axis walked from its last index (longest_first).
  std::string program_id_decode(bool reverse_fastest = false) const;
  bool longest_first() const;
  std::optional<int64_t> scalar_at(ir::ValueId v, size_t axis, int64_t pid) const;
  std::vector<size_t> program_order() const;
  int64_t raster_group() const;  // the raster groups' height, 0 for the row-major walk
  int pair_axis() const;         // the axis along which programs 2m and 2m + 1 differ, or -1
  std::set<size_t> program_axes_of(ir::ValueId v) const;
  std::set<size_t> program_axes_of(const std::vector<ir::ValueId>& vs) const;  // the union over vs
  // Warp-specialised kernels whose every tile streams through a served loop (matmul; persistent)
  // walk their programs in groups along two axes for L2 reuse; every other kernel by the most
  // shared input bytes (the attention forward, served or not, keeps a head's q blocks together).
  bool raster_groups() const { return producer_warps_ > 0 && tma_homes_.empty(); }
  // Thread-block clusters (emit_cluster.cc): two blocks, running programs 2m and 2m + 1, share
  // the served rings' tiles that do not depend on the pair's axis; each such tile's 64-column
  // boxes are split between them and multicast into both, and each slot goes back to both
  // producers. cluster_ is 1 or 2.
  int cluster_ = 1;
  std::set<ir::ValueId> multicast_;  // the TMA loads both blocks of a cluster read
  void choose_cluster();
  std::string cluster_sync() const;  // every thread of both blocks ("" without a cluster)
  void choose_tma();
  bool tma_eligible(ir::ValueId v);  // adds v's tensor map when the TMA can load its tile
  const TmaRing* tma_ring(const ir::Inst& loop) const {
    auto it = tma_rings_.find(&loop);
    return it == tma_rings_.end() ? nullptr : &it->second;
  }
  // Thread 0's copies of `load`'s tile into `dst`, completing on the barrier `pl_bar` (in scope).
  void emit_tma_issue(const ir::Inst& load, const std::string& dst);
  int64_t tma_barrier_bytes() const;     // the rings' barriers, after the exchange area
  int barrier_sets() const;              // the rings' barrier sets (a split ring has two)
  // The barrier set of `group` of a loop's ring (0 for any load where the ring is not split).
  int barrier_set(const ir::Inst& loop, int group) const;
  int load_group(const ir::Inst& loop, const ir::Inst& load) const;  // 0: read by the first dot, or not split
  std::string tma_kernel_setup(int64_t offset) const;  // kernel scope: the barriers (at `offset`) and phase bits
  std::string tma_parameters() const;     // the tensor-map parameters
  void emit_loop_prologue(const ir::Inst& loop);  // issues the first iterations' rounds
  std::vector<const ir::Inst*> prefetched_loads(const ir::Inst& loop) const;
  // The home buffer of a prefetched value for loop index `iteration` (a ring of stages_ buffers).
  std::string home_buffer(ir::ValueId v, const std::string& iteration) const;
  // The ring slot of loop index `iteration` (C++ text): (iteration - lo) % stages_, counted on from
  // the earlier runs of the loop (pl_base<ring>) where the producer warp serves it.
  std::string ring_slot(const ir::Inst& loop, const std::string& iteration) const;
  // A ring whose slot count is not a power of two, issued by the consumers: its loop carries the
  // slot of iteration i in a variable (by loop), so that slots i and i + k take no division.
  std::map<const ir::Inst*, std::string> carried_slot_;
  bool carries_slot(const ir::Inst& loop) const;
  int64_t max_fragment_regs_ = 0;        // registers of the largest dot's mma fragments
  int stages_ = 3;                        // pipeline depth of prefetched loads (buffers per home)
  // Adds folded into a dot's accumulator: add result -> the dot it aliases.
  std::map<ir::ValueId, ir::ValueId> alias_of;
  bool folded_into_dot(const ir::Inst& in) const { return in.results.size() == 1 && alias_of.count(in.results[0]); }
  std::map<ir::ValueId, ir::ValueId> dot_addend;
  // Transposes folded into a dot operand: transpose result -> its operand.
  std::map<ir::ValueId, ir::ValueId> folded_transpose;
  ir::ValueId unfolded(ir::ValueId v) const;  // v, or the operand of the transpose folded into it
  ir::ValueId pack_source(ir::ValueId v) const;  // what packing v into 16-bit pairs reads (emit_dot.cc)
  // A dot's operands as it reads them (through folded transposes) and their orientation flags.
  struct DotOperands {
    ir::ValueId a, b;
    bool ta, tb;
  };
  DotOperands dot_operands(const ir::Inst& dot) const;
  const ir::Inst* def(ir::ValueId v) const;
  int loop_depth_of(ir::ValueId v) const;

  const ir::Kernel& k_;
  CompilerParams params_;
  Target target_;
  int threads_ = 128;
  std::vector<Layout> layouts_;
  std::map<Shape, int> layout_by_shape_;
  std::vector<int64_t> scratch_offset_;   // per value; -1 unless Memory
  int64_t smem_homes_bytes_ = 0;          // dedicated shared tiles come first
  // Top-level instructions before which a barrier goes: a home begins there in memory that an
  // earlier home (whose live range has ended) used.
  std::set<size_t> reuse_barriers_;
  int64_t smem_stage_bytes_ = 0;          // the shared exchange area after them
  int64_t bulk_stage_bytes_ = 0;          // then the bulk reductions' staging rows (pl_bulk_s)
  int64_t global_stage_bytes_ = 0;
  int64_t global_stage_offset_ = 0;       // fixed after planning
  std::ostringstream body_;
  int indent_ = 1;
  std::vector<int> use_count_;
  std::vector<std::vector<const ir::Inst*>> users_;
  std::vector<const ir::Inst*> def_;
  std::vector<int> depth_;                // loop depth at which each value is defined
  std::vector<int> order_;                // pre-order position of each value's definition
  std::map<ir::ValueId, std::string> name_override_;
  std::set<int> written_refs_;            // refs the kernel stores to or updates atomically
  std::set<int> outputs_loaded_;          // written refs that need barriers between memory ops
  std::vector<DebugPrintInfo> debug_prints_;
  std::vector<backend::AccessSite> access_sites_;  // checked runs (params_.checks)
};

}  // namespace palladium::cuda
