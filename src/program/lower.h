// Lowering program equations into kernel IR: each step is a generated pallas_call whose kernel
// applies the kernel language's own op to blocks, so the interpreter, cpu and cuda run one
// definition of every array op. Families choose the grid and BlockSpecs (lower_*.cc).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "palladium/call.h"
#include "palladium/ref.h"
#include "palladium/value.h"
#include "program/program.h"

namespace palladium::detail {
class CallImpl;
}

namespace palladium::program {

// A generated kernel and how the executor feeds it: input var i is viewed (reshaped, no copy) as
// in_views[i] first.
struct KernelStep {
  std::shared_ptr<detail::CallImpl> call;
  std::vector<int> ins, outs;
  std::vector<Shape> in_views;
  std::vector<Array> extra;  // operands after the vars: static parameters passed at run time
  // A second call run on the first one's outputs (a reduction's partial results), whose outputs
  // are the step's.
  std::shared_ptr<detail::CallImpl> then;
};

// Elements per block of generated kernels on this backend (a tile the backend runs well).
int64_t block_budget(const std::string& backend);

// Groups of equations that run as one step: a fused group (elementwise equations, and reductions
// whose reduced axes fit one block, over one domain shape), or one equation.
struct FusionGroup {
  std::vector<size_t> eqns;  // indices into the program, in order
  std::vector<int> ins;      // vars read from outside the group
  std::vector<int> outs;     // vars used after the group (or returned)
  bool fused = false;          // lowered by lower_fused_group
  Shape domain;                // the shape every value of the group broadcasts to
  std::vector<int64_t> whole;  // domain axes the group reduces: held whole by every block
  // Every value the group produces, at the domain's rank with size-1 dimensions where it is
  // reduced or broadcast (its operands from outside are at_rank of their program shapes).
  std::map<int, Shape> embedded;
};
// A tile reduced over `axes` (reduce_sum/max/min, argmax/argmin) into `out`, inside a kernel: the
// reduced axes dropped; a 16-bit float sum into float32 is summed in float32.
Value reduce_tile(Prim prim, Value v, std::vector<int64_t> axes, DType out);
// One kernel for a fused group (`eqns` are its equations): the grid tiles the domain, its whole
// axes in one block; reductions reduce the block in registers.
KernelStep lower_fused_group(const Program& p, const std::vector<const Eqn*>& eqns, const FusionGroup& g,
                             const std::string& backend);
// The kernel language's value of one elementwise equation on blocks (block: the block shape of a
// kernel of grid rank `rank`, for iota's offsets).
Value apply_elementwise(const Eqn& e, const std::vector<Value>& ins, const Shape& block, size_t rank);

// A scan whose body is elementwise over one shape, as one kernel: the grid tiles that shape and
// each program runs the whole time loop on its block (no step leaves the kernel). nullopt when
// the body does not qualify.
std::optional<KernelStep> lower_fused_scan(const Program& p, const Eqn& e, const std::string& backend);

// How a matmul is tiled: batch dimensions one program each, (bm, bn) blocks of the result, the
// contraction walked in bk steps. Fused groups headed by a matmul use the same plan.
struct MatmulPlan {
  size_t nb = 0;  // batch dimensions
  int64_t m = 0, k = 0, n = 0, bm = 0, bn = 0, bk = 0;
  Shape grid;
  DType acc = DType::float32;
  CompilerParams compiler;  // warps and pipeline stages where the backend's tensor cores want them
  // Operands stored transposed (their last two axes swapped): the dot reads them so.
  bool trans_a = false, trans_b = false;
  BlockSpec spec(int64_t rows, int64_t cols, int row_axis, int col_axis) const;
  BlockSpec lhs_spec() const { return trans_a ? spec(k, bm, -1, 0) : spec(bm, k, 0, -1); }
  BlockSpec rhs_spec() const { return trans_b ? spec(bn, k, 1, -1) : spec(k, bn, -1, 1); }
  BlockSpec out_spec() const { return spec(bm, bn, 0, 1); }
  // The (bm, bn) block of a @ b in the accumulator dtype, inside a kernel.
  Value compute(const Ref& a, const Ref& b) const;
  std::string label() const;  // "128x128x64 w8 s3": the tiles and the compiler's warps and stages
};
// The extent up to which plan_matmul holds a matmul's rows and columns whole in one block (fusion
// fuses a reduction over such an axis into the matmul's kernel); the interpreter's largest blocks.
int64_t matmul_tile(const std::string& backend);
// `operand`: the operands' dtype (16-bit floats on CUDA take the tensor cores' tiles).
MatmulPlan plan_matmul(const Shape& a, const Shape& b, DType operand, DType out, const std::string& backend);
// plan_matmul's plan first, then other tilings worth timing (autotune) for these operands: on CUDA,
// 16-bit operands with at least 256 columns also try 128 x 256 blocks with 4 stages.
std::vector<MatmulPlan> matmul_plans(const Shape& a, const Shape& b, DType operand, DType out, const std::string& backend);

// One kernel for a single non-elementwise equation (reduce, argreduce, matmul, transpose,
// concatenate, slice, pad, dynamic_slice, dynamic_update_slice).
std::vector<KernelStep> lower_structural(const Program& p, const Eqn& e, const std::string& backend);

}  // namespace palladium::program
