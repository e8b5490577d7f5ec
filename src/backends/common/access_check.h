// Checked runs of the compiled backends (CompilerParams::checks, PALLADIUM_CHECKS=1): each memory
// op is an access site; generated code reports the first access outside its ref (or a block that
// its index_map puts outside the array), and the host turns the report into the interpreter's
// message for the same fault, so a user finds on real hardware what the interpreter would find.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace palladium::backend {

struct AccessSite {
  ir::Op op;
  int ref = 0;
};

// What one failed check found; kind: 0 = an index outside dimension `dim` of the ref, 1 = a block
// origin outside the array along array dimension `dim`.
struct AccessFailure {
  int32_t site = -1;
  int32_t kind = 0;
  int32_t dim = 0;
  int64_t value = 0;
  std::vector<int64_t> program;
};

// The comma-separated lists a generated check passes for one access: per ref dimension its start
// (spelled by start_of), selection size, stride and the ref's extent (integer literals + suffix).
struct SelectionLists {
  std::string starts, sizes, strides, extents;
};
SelectionLists selection_lists(const ir::Inst& in, const ir::RefParam& p,
                               const std::function<std::string(ir::ValueId)>& start_of, const std::string& suffix);

// The generated statements of one element check (C++ for cpu, CUDA C++ for cuda alike): the lists
// as arrays of `int_type`, then `check_fn(rank, ..., mask, &dim, &index)` and, when it fails,
// `on_fail` + "0, chk_dim, chk_index, " + `program` + ");" + `after`.
std::vector<std::string> selection_check_lines(const SelectionLists& l, size_t rank, const std::string& int_type,
                                               const std::string& dim_type, const std::string& check_fn,
                                               const std::string& mask, const std::string& on_fail,
                                               const std::string& program, const std::string& after);

// The generated statements that check a ref's block origins against its array (the interpreter's
// first check): `origin_of(value)` spells an origin, `on_fail` + "1, dim, origin, " + `program` +
// ");" + `after` reports.
std::vector<std::string> origin_check_lines(const ir::RefParam& p, const std::function<std::string(ir::ValueId)>& origin_of,
                                            const std::string& suffix, const std::string& on_fail, const std::string& program,
                                            const std::string& after);

// Whether checks are on for a compile: the params' flag or $PALLADIUM_CHECKS (1/true/on).
bool checks_enabled(bool requested);

// The error text, worded as the interpreter words the same fault, naming the backend.
std::string access_failure_message(const ir::Kernel& k, const std::vector<AccessSite>& sites, const AccessFailure& f,
                                   const std::string& backend);

}  // namespace palladium::backend
