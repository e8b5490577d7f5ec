// The reference interpreter: the executable definition of every IR op.
//
// It runs the programs of the grid one after another, evaluating each op over whole tiles. Values
// of floating dtypes are held as float64 and rounded to their dtype after every op (so float32
// arithmetic is exact float32); integers and bools as int64, wrapped to their width. Edge-block
// padding is poison: it flows through arithmetic and raises an Error when it would reach memory,
// a branch, a loop bound or an index. Out-of-bounds ref accesses, reads of output elements nothing
// wrote, and two programs writing one output element are Errors naming the kernel, the program,
// the op and the index.
#pragma once
#include "backends/backend.h"

namespace palladium::interp {

backend::Backend& backend();

}  // namespace palladium::interp
