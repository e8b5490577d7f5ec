// Shared machinery of the transformations: tracing a flat function into a closed Program,
// evaluating a Program on Arrays (re-binding its equations: traced into the open trace, else run
// eagerly), and the program rewrites (optimize, vjp_program) with their rule tables.
#pragma once
#include <string>
#include <vector>

#include "palladium/transforms.h"
#include "program/program.h"

namespace palladium::program {

struct Traced {
  Program program;             // inputs: the flat arguments, then the captured outer values
  std::vector<Array> captured; // the outer Arrays for the captured inputs
};
Traced trace_flat(const std::string& name, const detail::FlatFn& f, const std::vector<Type>& in_types, Device device);
std::vector<Type> types_of(const std::vector<Array>& xs);
// The device of the first concrete Array (or of the open trace; else the host).
Device device_of(const std::vector<Array>& xs);

std::vector<Array> bind_eqn(const Eqn& e, const std::vector<Array>& ins);
std::vector<Array> eval_program(const Program& p, const std::vector<Array>& ins);

// Common-subexpression elimination (and products with one dropped), then dead-code elimination.
Program optimize(const Program& p);

// Runs of identical iterations that a C++ loop unrolled while tracing become scans again, where the
// scan's body is one elementwise kernel (reroll.cc has the conditions); the program is unchanged
// otherwise.
Program reroll_loops(const Program& p);

// Reverse mode: a program from (inputs..., output cotangents...) to (outputs..., cotangents of the
// inputs marked in `wrt`; undefined where no gradient flows).
Program vjp_program(const Program& p, const std::vector<bool>& wrt, Device device);

// One VJP rule per primitive (vjp_rules.cc), named in prims.def: input cotangents (undefined: none)
// from the inputs, outputs and output cotangents (undefined: zero) of one equation.
using VjpRule = std::vector<Array> (*)(const Eqn& e, const std::vector<Array>& ins, const std::vector<Array>& outs,
                                       const std::vector<Array>& cts);
VjpRule vjp_rule(Prim p);

// Batched evaluation of a program: operands marked `batched` carry a batch of `size` on axis 0.
std::vector<Array> vmap_program(const Program& p, const std::vector<Array>& ins, const std::vector<bool>& batched,
                                int64_t size);

// One batching rule per primitive (batch_rules.cc): operands with `batched[i]` carry the batch of
// size `size` on axis 0; returns the results, each batched on axis 0 (out_batched says which).
using BatchRule = std::vector<Array> (*)(const Eqn& e, const std::vector<Array>& ins, const std::vector<bool>& batched,
                                         int64_t size, std::vector<bool>& out_batched);
BatchRule batch_rule(Prim p);

}  // namespace palladium::program
