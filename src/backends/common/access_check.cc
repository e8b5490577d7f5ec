#include "backends/common/access_check.h"

#include <cstdlib>
#include <sstream>

namespace palladium::backend {

bool checks_enabled(bool requested) {
  if (requested) return true;
  const char* env = std::getenv("PALLADIUM_CHECKS");
  if (env == nullptr) return false;
  const std::string v = env;
  return v == "1" || v == "true" || v == "on" || v == "yes";
}

SelectionLists selection_lists(const ir::Inst& in, const ir::RefParam& p,
                               const std::function<std::string(ir::ValueId)>& start_of, const std::string& suffix) {
  SelectionLists l;
  for (size_t d = 0; d < in.index.size(); ++d) {
    const ir::IndexEntry& e = in.index[d];
    const std::string sep = d ? ", " : "";
    l.starts += sep + start_of(in.operands[d]);
    l.sizes += sep + std::to_string(e.scalar ? 1 : e.size) + suffix;
    l.strides += sep + std::to_string(e.scalar ? 1 : e.stride) + suffix;
    l.extents += sep + std::to_string(p.ref_shape[d]) + suffix;
  }
  return l;
}

std::vector<std::string> origin_check_lines(const ir::RefParam& p, const std::function<std::string(ir::ValueId)>& origin_of,
                                            const std::string& suffix, const std::string& on_fail, const std::string& program,
                                            const std::string& after) {
  std::vector<std::string> lines;
  for (size_t a = 0; a < p.array_shape.size(); ++a) {
    const std::string o = origin_of(p.origin[a]);
    lines.push_back("if (" + o + " >= " + std::to_string(p.array_shape[a]) + suffix + " || " + o + " + " +
                    std::to_string(p.block_shape[a]) + suffix + " <= 0) " + on_fail + "1, " + std::to_string(a) + ", " + o + ", " +
                    program + ");" + after);
  }
  return lines;
}

std::vector<std::string> selection_check_lines(const SelectionLists& l, size_t rank, const std::string& int_type,
                                               const std::string& dim_type, const std::string& check_fn,
                                               const std::string& mask, const std::string& on_fail,
                                               const std::string& program, const std::string& after) {
  return {"const " + int_type + " chk_start[] = {" + l.starts + "}, chk_size[] = {" + l.sizes + "}, chk_stride[] = {" +
              l.strides + "}, chk_extent[] = {" + l.extents + "};",
          dim_type + " chk_dim = 0;", int_type + " chk_index = 0;",
          "if (!" + check_fn + "(" + std::to_string(rank) + ", chk_start, chk_size, chk_stride, chk_extent, " + mask +
              ", &chk_dim, &chk_index)) " + on_fail + "0, chk_dim, chk_index, " + program + ");" + after};
}

std::string access_failure_message(const ir::Kernel& k, const std::vector<AccessSite>& sites, const AccessFailure& f,
                                   const std::string& backend) {
  std::ostringstream os;
  os << "pallas_call '" << k.name << "', program (";
  for (size_t d = 0; d < f.program.size(); ++d) os << (d ? ", " : "") << f.program[d];
  const AccessSite& site = sites.at(static_cast<size_t>(f.site));
  const ir::RefParam& p = k.refs.at(static_cast<size_t>(site.ref));
  os << "), op '" << ir::op_name(site.op) << "': ";
  if (f.kind == 0) {
    os << "index " << f.value << " is out of bounds for dimension " << f.dim << " of ref " << p.name << " with shape "
       << shape_str(p.ref_shape);
  } else {
    os << "the index_map of ref " << p.name << " places its block at element " << f.value << " of dimension " << f.dim
       << ", entirely outside the array of shape " << shape_str(p.array_shape);
  }
  os << " (found by a checked run on the " << backend << " backend)";
  return os.str();
}

}  // namespace palladium::backend
