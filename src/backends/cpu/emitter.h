// The cpu backend's code generator (internal to src/backends/cpu). The driver and the analyses
// live in emitter.cc; each op family is emitted by its own file (emit_*.cc).
//
// Shape of the generated code: the kernel body becomes `run_program`, called once per program.
// Every value is one of the ValueKinds below. Tiles are stack arrays of their compute type with
// static sizes (so loops have constant trip counts and vectorise); pool threads have large
// stacks, and `frame_bytes` bounds what one program needs. Runs of elementwise ops over one shape
// are fused into a single loop whose intermediates are scalars (Fused values); dots read their
// operands from refs and write their results to refs directly where they can (emit_dot.cc); and
// loop carries are updated in place where no later reader could see the change.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backends/common/access_check.h"
#include "backends/cpu/codegen.h"

namespace palladium::cpu {

// C++ spelling of a dtype's compute type ("float" for float16) and storage type ("pl_cpu::Half").
const char* compute_type(DType t);
const char* storage_type(DType t);
// A C++ literal of the compute type: f for float dtypes, i for the others.
std::string literal(DType t, double f, int64_t i);
// Wraps an expression of the compute type so its value is rounded to dtype t.
std::string rounded(DType t, const std::string& expr);

enum class ValueKind : uint8_t {
  Dead,             // no live user: never emitted
  Scalar,           // rank 0: a C++ variable vN of the compute type
  Tile,             // a row-major array vN (or a pointer to one, for aliases)
  Fused,            // lives only as tN inside its elementwise loop
  MatrixView,       // a load that a dot reads straight from the ref: a pl_cpu::MatrixIn vN
  FoldedTranspose,  // a 2-D transpose that the dot consuming it absorbs
  DeferredDot,      // a dot emitted where its single user (a store or an add) is
};

// A run of fusable elementwise instructions over one shape, emitted as one loop.
struct FusionGroup {
  std::vector<const ir::Inst*> members;
  Shape shape;
  bool needs_indices = false;  // an iota or a broadcast from a tile reads per-dimension indices
};

class Emitter {
 public:
  Emitter(const ir::Kernel& kernel, bool checks);
  GeneratedKernel run();

 private:
  // ---- analysis (emitter.cc) ----
  bool has_effects(const ir::Inst& in);
  void mark_live(const ir::Region& r);
  void add_user(ir::ValueId v, const ir::Inst* user);
  void plan_region(const ir::Region& r);
  void plan_dot(const ir::Inst& dot, const ir::Region& region);
  void plan_groups(const ir::Region& r);
  void plan_in_place_yields(const ir::Region& r, const FusionGroup& group, size_t g);
  void plan_fused_store(const ir::Region& r, const FusionGroup& group, size_t g);
  bool is_fusable(const ir::Inst& in) const;
  bool live(const ir::Inst& in) const { return live_.count(&in) != 0; }
  const std::vector<const ir::Inst*>& users(ir::ValueId v) const { return users_[static_cast<size_t>(v)]; }

  // ---- output helpers (emitter.cc) ----
  void line(const std::string& text);
  void open(const std::string& head);  // "head {" and indent
  void close(const std::string& tail = "");
  std::string fresh(const std::string& prefix);
  const ir::Type& type(ir::ValueId v) const { return kernel_.type(v); }
  ValueKind kind(ir::ValueId v) const { return kinds_[static_cast<size_t>(v)]; }
  static std::string name(ir::ValueId v) { return "v" + std::to_string(v); }
  static std::string as_int64(ir::ValueId v) { return "static_cast<int64_t>(" + name(v) + ")"; }  // a scalar index
  static std::string temp(ir::ValueId v) { return "t" + std::to_string(v); }
  // Declares the stack array of a Tile value and counts it in the frame.
  void declare_tile(ir::ValueId v);
  void declare_array(const std::string& name, DType dtype, int64_t elements);
  // Storage that value v reads from (follows aliases), for loop-carry hazards.
  std::string root(ir::ValueId v) const;
  // Region emission: everything but the final yield, which the caller consumes.
  void emit_region(const ir::Region& r);
  void emit_inst(const ir::Inst& in);
  std::string ref_pointer(int ref) const { return "r" + std::to_string(ref); }

  // ---- elementwise (emit_elementwise.cc) ----
  std::string elementwise_expr(const ir::Inst& in, const std::vector<std::string>& args) const;
  std::string cast_expr(DType from, DType to, const std::string& x) const;
  void emit_scalar_op(const ir::Inst& in);
  void emit_group(const FusionGroup& g);
  // The group's member expressions for element i (tN); materialize also stores its Tile values.
  void emit_group_body(const FusionGroup& g, bool materialize);
  bool in_group(ir::ValueId u, const FusionGroup& g) const;  // computed by g's own members
  std::vector<ir::ValueId> indexed_inputs(const FusionGroup& g);

  // ---- layout, reductions, scans (emit_layout.cc) ----
  void emit_reshape(const ir::Inst& in);
  void emit_transpose(const ir::Inst& in);
  void emit_reduce(const ir::Inst& in);
  void emit_cumsum(const ir::Inst& in);

  // ---- dot (emit_dot.cc) ----
  void emit_dot(const ir::Inst& in);
  // The gemm call computing `dot` into `out` (a MatrixOut expression), accumulating or not.
  void emit_gemm(const ir::Inst& dot, const std::string& out, bool accumulate);
  std::string matrix_operand(ir::ValueId v, bool transposed) const;
  void emit_dot_accumulate(const ir::Inst& add);

  // ---- memory (emit_memory.cc) ----
  struct Access;  // index arithmetic of one load/store/atomic
  using RowEmitter = std::function<void(const std::string& flat, const std::string& off, const std::string& lo,
                                        const std::string& hi)>;
  Access plan_access(const ir::Inst& in);
  void emit_rows(const Access& a, const RowEmitter& row);
  void emit_fused_rows(const ir::Inst& store, const Access& a, const FusionGroup& g, bool streaming);
  void emit_load(const ir::Inst& in);
  // A load from an input ref whose every user is an elementwise loop: read in place (see emit_load).
  bool reads_in_place(const ir::Inst& load) const;
  void emit_matrix_view(const ir::Inst& in);
  void emit_store(const ir::Inst& in);
  void emit_atomic(const ir::Inst& in);
  // Loads, stores and atomics indexed by integer tiles: one lane at a time.
  void emit_gather(const ir::Inst& in);
  // Checked runs: report the access's first element outside its ref (or its block outside the
  // array) to the host and end the program.
  void emit_access_check(const ir::Inst& in);

  // ---- control flow and effects (emit_control.cc) ----
  void emit_for(const ir::Inst& in);
  void emit_while(const ir::Inst& in);
  void emit_if(const ir::Inst& in);
  // Declares the loop-carried storage (named after the results) initialised from `init`.
  void declare_carries(const ir::Inst& in, const std::vector<ir::ValueId>& init);
  void bind_region_args(const ir::Region& r, size_t first_arg, const std::vector<ir::ValueId>& storage);
  void emit_yield_into(const ir::Inst& yield, const std::vector<ir::ValueId>& storage, bool fresh_storage);
  void emit_debug_print(const ir::Inst& in);

  const ir::Kernel& kernel_;
  const bool checks_;
  std::vector<backend::AccessSite> sites_;
  std::string out_;
  int indent_ = 0;
  int next_fresh_ = 0;
  int64_t frame_bytes_ = 0;
  int64_t gemm_scratch_a_ = 0, gemm_scratch_b_ = 0;  // floats, the largest any f32 dot needs
  bool uses_streaming_stores_ = false;                 // the entry point must end with a store fence

  std::vector<ValueKind> kinds_;
  std::vector<std::vector<const ir::Inst*>> users_;
  std::vector<const ir::Inst*> def_;
  std::set<const ir::Inst*> live_;
  std::map<const ir::Inst*, bool> effects_;
  std::vector<FusionGroup> groups_;
  std::map<const ir::Inst*, size_t> group_of_;  // first member -> group; other members -> group too
  std::map<const ir::Inst*, const ir::Inst*> deferred_dot_;  // store/add -> the dot it computes
  std::map<const ir::Inst*, size_t> fused_store_;            // store -> the group it computes (plan_fused_store)
  std::set<size_t> deferred_groups_;                         // groups emitted at their store
  // Values computed straight into a loop carry's storage (value -> the body argument naming it):
  // `acc + dot` adds and fused-loop results (see plan_dot, plan_in_place_yields).
  std::map<ir::ValueId, ir::ValueId> in_place_;
  std::map<ir::ValueId, std::string> alias_root_;  // value -> storage it aliases
  std::map<const ir::Inst*, const ir::Region*> parent_;
  struct CarryArg {
    const ir::Region* region;
    size_t carry;  // position among the loop's carries
  };
  std::map<ir::ValueId, CarryArg> carry_args_;  // loop body args that carry a value
  std::vector<PrintSite> prints_;
};

}  // namespace palladium::cpu
