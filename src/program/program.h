// The program IR (Palladium's jaxpr): typed equations `outs = prim[params](ins)` over Array values.
// A Program is closed: its inputs are the traced function's arguments followed by the values it
// captured from enclosing traces; concrete Arrays it closed over are constants.
//
// Conventions: every value is a var id indexing `types`; each var is defined once, by being an
// input, a constant or an output of exactly one equation that precedes its uses. Regions (scan,
// while, cond bodies) are Programs of their own, held in the equation's params.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "palladium/array.h"

namespace palladium::program {

enum class Prim : uint16_t {
#define PL_PRIM(name, family, vjp, batch, shard) name,
#include "program/prims.def"
#undef PL_PRIM
};
const char* prim_name(Prim p);

struct Type {
  Shape shape;
  DType dtype = DType::float32;
  bool operator==(const Type&) const = default;
};
std::string type_str(const Type& t);  // "f32[8,4]"
// "|f32[8,4]|i32[]": the types of these Arrays, for the compiled-program caches' keys.
std::string types_key(const std::vector<Array>& xs);

struct Program;

// Everything static about one equation. Fields a primitive does not use stay default; `key()`
// writes the used ones exactly (CSE and the compiled-kernel caches compare keys).
struct Params {
  std::vector<int64_t> axes;     // reduce axes, transpose permutation
  Shape shape;                   // reshape / broadcast / full / iota target, dynamic_slice sizes
  std::vector<int64_t> lo, hi, step;  // slice start/limit/stride; pad low/high
  DType dtype = DType::float32;  // astype, full, iota
  double scalar = 0.0;           // full's value, pad's value
  int64_t axis = 0;              // concatenate, iota, argmax/argmin
  int64_t count = 0;             // scan length, carries of while/scan
  int64_t count2 = 0;            // scan: number of loop-invariant inputs
  bool flag = false;             // scan: reverse
  std::string name;              // pallas_call / custom_vjp: the callee's name
  std::shared_ptr<const void> callee;  // pallas_call: detail::CallImpl; custom_vjp: CustomVjp
  std::vector<std::shared_ptr<const Program>> regions;
  std::vector<Type> out_types;   // call-like primitives: their results (fixed by the callee)
  std::string key() const;
};

struct Eqn {
  Prim prim{};
  Params params;
  std::vector<int> ins;
  std::vector<int> outs;
};

struct Program {
  std::string name = "program";
  std::vector<Type> types;      // indexed by var id
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::vector<int> const_vars;  // vars bound to `consts`, in order
  std::vector<Array> consts;
  std::vector<Eqn> eqns;

  int new_var(Type t) {
    types.push_back(std::move(t));
    return static_cast<int>(types.size()) - 1;
  }
  const Type& type(int v) const { return types.at(static_cast<size_t>(v)); }
};

std::string print(const Program& p);
// Renumbers the vars densely (inputs, constants, then each equation's results, in order) and drops
// the types of vars no equation defines any more: the executor's environment is sized by the var
// count, so a program that rewrites left thousands of dead vars in would pay for them every call.
// Regions keep their own numbering.
Program compact(Program p);
// Checks the invariants above and each equation's types against its shape rule; throws
// InternalError naming the equation on a violation.
void verify(const Program& p);

}  // namespace palladium::program
