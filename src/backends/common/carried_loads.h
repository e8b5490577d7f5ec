// Small loads of a loop's next iteration issued in the iteration before, their values carried.
//
// The attention backward's dK/dV loop loads, each iteration, the lse and delta of the query block
// it visits: vectors of a block's rows, indexed by the loop counter. ptxas issues such a read-only
// load where it sees fit, and at head_dim 128 it issues delta's after dv's dot, a few
// instructions before its use: the warps then wait for it (4% of the backward's warp samples on
// an H200, stop 46 job 33). This pass loads iteration i + 1's vector at the end of iteration i
// (and iteration lo's before the loop) and carries it to its uses, so that the load has a whole
// iteration to arrive, which no scheduler can undo across the back edge. Only loads of refs the
// kernel never writes move, with the pure index arithmetic they need; the last iteration loads
// block hi - 1 again rather than one past the end.
#pragma once

#include "ir/ir.h"

namespace palladium::backend {

// The kernel with each For loop's loads of at most `max_elements` elements, of rank 0 or 1,
// indexed by the loop counter, carried from the iteration before; an unchanged copy where there
// are none.
ir::Kernel carry_loop_loads(const ir::Kernel& kernel, int64_t max_elements);

}  // namespace palladium::backend
