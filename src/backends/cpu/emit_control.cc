// cpu codegen: structured control flow (the interpreter's Machine::control) and debug_print.
//
// Loop carries live in storage named after the loop's results, declared before the loop; the
// body's arguments are names for that storage (scalars copied in, tiles aliased), and the yield
// copies the new values back. A yielded value that still reads another carry's storage is
// copied aside first, so every carry updates from the previous iteration's values.
#include "backends/cpu/emitter.h"

namespace palladium::cpu {

void Emitter::declare_carries(const ir::Inst& in, const std::vector<ir::ValueId>& init) {
  for (size_t k = 0; k < in.results.size(); ++k) {
    const ir::ValueId r = in.results[k];
    if (type(r).shape.empty()) {
      line(std::string(compute_type(type(r).dtype)) + " " + name(r) + " = " + name(init[k]) + ";");
    } else {
      declare_tile(r);
      line("pl_cpu::copy(" + name(r) + ", " + name(init[k]) + ", " + std::to_string(numel(type(r).shape)) + ");");
    }
  }
}

void Emitter::bind_region_args(const ir::Region& r, size_t first_arg, const std::vector<ir::ValueId>& storage) {
  for (size_t a = first_arg; a < r.args.size(); ++a) {
    const ir::ValueId arg = r.args[a], s = storage[a - first_arg];
    const std::string ct = compute_type(type(arg).dtype);
    if (type(arg).shape.empty()) {
      line("const " + ct + " " + name(arg) + " = " + name(s) + ";");
    } else {
      line(ct + "* const " + name(arg) + " = " + name(s) + ";");
      alias_root_[arg] = name(s);
    }
  }
}

void Emitter::emit_yield_into(const ir::Inst& yield, const std::vector<ir::ValueId>& storage, bool fresh_storage) {
  std::vector<std::string> source(storage.size());
  for (size_t k = 0; k < storage.size(); ++k) {
    const ir::ValueId v = yield.operands[k], s = storage[k];
    const std::string ct = compute_type(type(s).dtype);
    source[k] = name(v);
    if (type(s).shape.empty()) {
      if (!fresh_storage) {  // scalars are cheap: always go through a temporary
        source[k] = fresh("y");
        line("const " + ct + " " + source[k] + " = " + name(v) + ";");
      }
      continue;
    }
    if (fresh_storage || root(v) == name(s)) continue;
    bool reads_other_carry = false;
    for (size_t j = 0; j < storage.size(); ++j) reads_other_carry = reads_other_carry || (j != k && root(v) == name(storage[j]));
    if (reads_other_carry) {
      source[k] = fresh("y");
      const int64_t n = numel(type(s).shape);
      declare_array(source[k], type(s).dtype, n);
      line("pl_cpu::copy(" + source[k] + ", " + name(v) + ", " + std::to_string(n) + ");");
    }
  }
  for (size_t k = 0; k < storage.size(); ++k) {
    const ir::ValueId s = storage[k];
    if (type(s).shape.empty()) {
      line(name(s) + " = " + source[k] + ";");
    } else if (root(yield.operands[k]) != name(s)) {
      line("pl_cpu::copy(" + name(s) + ", " + source[k] + ", " + std::to_string(numel(type(s).shape)) + ");");
    }
  }
}

void Emitter::emit_for(const ir::Inst& in) {
  const std::vector<ir::ValueId> init(in.operands.begin() + 2, in.operands.end());
  declare_carries(in, init);
  const ir::Region& body = in.regions[0];
  const std::string it = fresh("it");
  open("for (int64_t " + it + " = static_cast<int64_t>(" + name(in.operands[0]) + "); " + it + " < static_cast<int64_t>(" +
       name(in.operands[1]) + "); ++" + it + ")");
  line("PL_SEQUENTIAL_LOOP();");
  const ir::ValueId index = body.args[0];
  line(std::string("const ") + compute_type(type(index).dtype) + " " + name(index) + " = static_cast<" +
       compute_type(type(index).dtype) + ">(" + it + ");");
  bind_region_args(body, 1, in.results);
  emit_region(body);
  emit_yield_into(body.body.back(), in.results, false);
  close();
}

void Emitter::emit_while(const ir::Inst& in) {
  declare_carries(in, in.operands);
  open("while (true)");
  line("PL_SEQUENTIAL_LOOP();");
  const ir::Region& cond = in.regions[0];
  bind_region_args(cond, 0, in.results);
  emit_region(cond);
  line("if (!" + name(cond.body.back().operands[0]) + ") break;");
  const ir::Region& body = in.regions[1];
  bind_region_args(body, 0, in.results);
  emit_region(body);
  emit_yield_into(body.body.back(), in.results, false);
  close();
}

void Emitter::emit_if(const ir::Inst& in) {
  for (ir::ValueId r : in.results) {
    if (type(r).shape.empty()) line(std::string(compute_type(type(r).dtype)) + " " + name(r) + ";");
    else declare_tile(r);
  }
  open("if (" + name(in.operands[0]) + ")");
  emit_region(in.regions[0]);
  emit_yield_into(in.regions[0].body.back(), in.results, true);
  close();
  open("else");
  emit_region(in.regions[1]);
  emit_yield_into(in.regions[1].body.back(), in.results, true);
  close();
}

void Emitter::emit_debug_print(const ir::Inst& in) {
  PrintSite site{in.text, {}};
  std::string values;
  for (ir::ValueId v : in.operands) {
    site.types.push_back(type(v));
    values += (values.empty() ? "" : ", ") + (type(v).shape.empty() ? "&" + name(v) : name(v));
  }
  const std::string id = std::to_string(prints_.size());
  prints_.push_back(std::move(site));
  open("");
  if (in.operands.empty()) line("const void* const* values = nullptr;");
  else line("const void* values[] = {" + values + "};");
  line("launch.print(launch.host, " + id + ", program, values);");
  close();
}

}  // namespace palladium::cpu
