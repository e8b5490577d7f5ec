// The order in which a partitioned program's equations run on each device (schedule.cc).
#pragma once
#include "program/program.h"

namespace palladium::program {

// `p` with its equations reordered so that each collective starts as early as its operands allow
// and the work it does not depend on runs while it is in flight; `p` itself where it has no
// collectives. Deterministic: every device of a run gets the same order, so their collectives meet.
Program schedule_collectives_early(const Program& p);

}  // namespace palladium::program
