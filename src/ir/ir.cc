#include "ir/ir.h"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

#include "palladium/error.h"

namespace palladium::ir {

const char* op_name(Op op) {
  switch (op) {
#define PL_OP(Name, name, Family) case Op::Name: return name;
#include "ir/ops.def"
#undef PL_OP
  }
  return "?";
}

Family op_family(Op op) {
  switch (op) {
#define PL_OP(Name, name, Fam) case Op::Name: return Family::Fam;
#include "ir/ops.def"
#undef PL_OP
  }
  return Family::Leaf;
}

std::string type_str(const Type& t) {
  std::string s = dtype_short_name(t.dtype);
  s += "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
  return s + "]";
}

namespace {

class Printer {
 public:
  explicit Printer(const Kernel& k) : k_(k) {}

  std::string run() {
    os_ << "kernel " << k_.name << " grid=" << shape_str(k_.grid);
    if (k_.any_sequential()) {
      os_ << " sequential=(";
      bool first = true;
      for (size_t a = 0; a < k_.grid.size(); ++a)
        if (k_.is_sequential(a)) os_ << (first ? "" : ", ") << a, first = false;
      os_ << ")";
    }
    os_ << "\n";
    for (const RefParam& p : k_.refs) {
      os_ << "  ref " << p.name << ": " << type_str({p.dtype, p.ref_shape}) << (p.is_output ? " out" : " in")
          << " <- block " << shape_str(p.block_shape) << " of " << type_str({p.dtype, p.array_shape});
      if (!p.origin.empty()) {
        os_ << " at (";
        for (size_t d = 0; d < p.origin.size(); ++d) os_ << (d ? ", " : "") << "%" << p.origin[d];
        os_ << ")";
      }
      os_ << "\n";
    }
    region(k_.body, 1);
    return os_.str();
  }

 private:
  void indent(int depth) { for (int i = 0; i < depth; ++i) os_ << "  "; }
  std::string v(ValueId id) { return "%" + std::to_string(id); }

  void index(const Inst& in) {
    const RefParam& p = k_.refs.at(static_cast<size_t>(in.i0));
    os_ << p.name << "[";
    for (size_t d = 0; d < in.index.size(); ++d) {
      os_ << (d ? ", " : "") << v(in.operands[d]);
      if (in.index[d].gather) {
        os_ << ":gather";
      } else if (!in.index[d].scalar) {
        os_ << ":+" << in.index[d].size;
        if (in.index[d].stride != 1) os_ << ":" << in.index[d].stride;
      }
    }
    os_ << "]";
  }

  void inst(const Inst& in, int depth) {
    indent(depth);
    for (size_t i = 0; i < in.results.size(); ++i)
      os_ << (i ? ", " : "") << v(in.results[i]) << ":" << type_str(k_.type(in.results[i]));
    if (!in.results.empty()) os_ << " = ";
    os_ << op_name(in.op);
    const Family fam = op_family(in.op);
    if (in.op == Op::Const) {
      os_ << " " << (is_float(k_.type(in.results[0]).dtype) ? std::to_string(in.f) : std::to_string(in.i0));
    } else if (in.op == Op::ProgramId || in.op == Op::NumPrograms || in.op == Op::Iota || fam == Family::Reduce ||
               fam == Family::Scan) {
      os_ << " axis=" << in.i0;
    }
    if (fam == Family::Memory) {
      os_ << " ";
      index(in);
      size_t rest = in.index.size();
      if (in.op != Op::Load) os_ << " <- " << v(in.operands[rest++]);
      if (in.op == Op::AtomicCas) os_ << " new=" << v(in.operands[rest++]);
      if (in.i1 & kHasMask) os_ << " mask=" << v(in.operands[rest++]);
      if (in.i1 & kHasOther) os_ << " other=" << v(in.operands[rest++]);
    } else {
      for (size_t i = 0; i < in.operands.size(); ++i) os_ << (i ? ", " : " ") << v(in.operands[i]);
    }
    if (in.op == Op::Dot) os_ << (in.i0 ? " trans_a" : "") << (in.i1 ? " trans_b" : "");
    if (!in.ints.empty()) {
      os_ << " dims=(";
      for (size_t i = 0; i < in.ints.size(); ++i) os_ << (i ? "," : "") << in.ints[i];
      os_ << ")";
    }
    if (!in.text.empty()) os_ << " \"" << in.text << "\"";
    os_ << "\n";
    for (size_t r = 0; r < in.regions.size(); ++r) {
      indent(depth + 1);
      os_ << (in.op == Op::If ? (r == 0 ? "then" : "else") : in.op == Op::While ? (r == 0 ? "cond" : "body") : "body");
      os_ << "(";
      for (size_t a = 0; a < in.regions[r].args.size(); ++a) os_ << (a ? ", " : "") << v(in.regions[r].args[a]);
      os_ << "):\n";
      region(in.regions[r], depth + 2);
    }
  }

  void region(const Region& r, int depth) {
    for (const Inst& in : r.body) inst(in, depth);
  }

  const Kernel& k_;
  std::ostringstream os_;
};

class Verifier {
 public:
  explicit Verifier(const Kernel& k) : k_(k), defined_(k.types.size(), false), ever_defined_(k.types.size(), false) {}

  void run() {
    check(k_.sequential.empty() || k_.sequential.size() == k_.grid.size(), "sequential flags do not match the grid rank");
    for (const RefParam& p : k_.refs) {
      check(p.block_shape.size() == p.array_shape.size() && p.squeezed.size() == p.array_shape.size(),
            "ref " + p.name + " block rank");
    }
    for (const Inst& in : k_.body.body) {
      if (in.op == Op::Yield) fail("yield at the top level");
      inst(in);
    }
    // Origins are defined in the top-level body.
    for (const RefParam& p : k_.refs)
      for (ValueId o : p.origin) check(defined(o), "origin of ref " + p.name + " is not defined");
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    std::string text;
    try {
      text = print(k_);
    } catch (const std::exception& e) {  // the kernel may be too broken to print
      text = std::string("(the kernel cannot be printed: ") + e.what() + ")";
    }
    throw InternalError("IR verifier, kernel '" + k_.name + "': " + what + "\n" + text);
  }
  void check(bool ok, const std::string& what) { if (!ok) fail(what); }
  bool defined(ValueId v) { return v >= 0 && static_cast<size_t>(v) < defined_.size() && defined_[static_cast<size_t>(v)]; }
  void define(ValueId v) {
    check(v >= 0 && static_cast<size_t>(v) < defined_.size(), "result id out of range");
    check(!ever_defined_[static_cast<size_t>(v)], "value %" + std::to_string(v) + " defined twice");
    defined_[static_cast<size_t>(v)] = true;
    ever_defined_[static_cast<size_t>(v)] = true;
    in_scope_.push_back(v);
  }

  // Values defined in a region are visible only inside it.
  void region(const Region& r, size_t expected_yield) {
    const size_t scope_start = in_scope_.size();
    for (ValueId a : r.args) define(a);
    check(!r.body.empty() && r.body.back().op == Op::Yield, "region does not end in yield");
    for (size_t i = 0; i + 1 < r.body.size(); ++i) {
      check(r.body[i].op != Op::Yield, "yield before the end of a region");
      inst(r.body[i]);
    }
    for (ValueId v : r.body.back().operands) check(defined(v), "yield of an undefined value");
    check(r.body.back().operands.size() == expected_yield, "region yields the wrong number of values");
    while (in_scope_.size() > scope_start) {
      defined_[static_cast<size_t>(in_scope_.back())] = false;
      in_scope_.pop_back();
    }
  }

  void inst(const Inst& in) {
    for (ValueId v : in.operands)
      check(defined(v), std::string(op_name(in.op)) + " uses %" + std::to_string(v) + " before its definition");
    switch (in.op) {
      case Op::For:
        check(in.regions.size() == 1 && in.operands.size() >= 2, "for shape");
        check(in.regions[0].args.size() == in.operands.size() - 1, "for region args");
        region(in.regions[0], in.results.size());
        break;
      case Op::While:
        check(in.regions.size() == 2, "while shape");
        region(in.regions[0], 1);
        region(in.regions[1], in.results.size());
        break;
      case Op::If:
        check(in.regions.size() == 2, "if shape");
        region(in.regions[0], in.results.size());
        region(in.regions[1], in.results.size());
        break;
      default:
        check(in.regions.empty(), std::string(op_name(in.op)) + " has regions");
    }
    if (op_family(in.op) == Family::Binary || op_family(in.op) == Family::Compare) {
      check(in.operands.size() == 2 && k_.type(in.operands[0]) == k_.type(in.operands[1]),
            std::string(op_name(in.op)) + " operand types differ");
    }
    if (op_family(in.op) == Family::Memory) {
      check(in.i0 >= 0 && static_cast<size_t>(in.i0) < k_.refs.size(), "memory op ref index");
      const RefParam& ref = k_.refs[static_cast<size_t>(in.i0)];
      check(in.index.size() == ref.ref_shape.size(), "memory op index rank");
      check(in.op == Op::Load || ref.is_output, std::string(op_name(in.op)) + " writes input ref " + ref.name);
    }
    for (ValueId r : in.results) define(r);
  }

  const Kernel& k_;
  std::vector<bool> defined_;
  std::vector<bool> ever_defined_;
  std::vector<ValueId> in_scope_;  // defined values, innermost region last
};

}  // namespace

std::string print(const Kernel& k) { return Printer(k).run(); }
bool has_effects(const Inst& in) {
  if (in.op == Op::Store || is_atomic(in.op) || in.op == Op::DebugPrint) return true;
  for (const Region& r : in.regions)
    for (const Inst& inner : r.body)
      if (has_effects(inner)) return true;
  return false;
}
bool reads(const Inst& in, const std::set<ValueId>& values) {
  for (ValueId o : in.operands)
    if (values.count(o)) return true;
  for (const Region& r : in.regions)
    for (const Inst& inner : r.body)
      if (reads(inner, values)) return true;
  return false;
}
void verify(const Kernel& k) { Verifier(k).run(); }

void remove_dead_code(Kernel& k) {
  for (bool changed = true; changed;) {
    changed = false;
    std::map<ValueId, int> uses;
    std::function<void(const Region&)> count = [&](const Region& r) {
      for (const Inst& in : r.body) {
        for (ValueId o : in.operands) ++uses[o];
        for (const Region& s : in.regions) count(s);
      }
    };
    count(k.body);
    for (const RefParam& p : k.refs)
      for (ValueId o : p.origin) ++uses[o];
    std::function<void(std::vector<Inst>&)> sweep = [&](std::vector<Inst>& insts) {
      const size_t n = insts.size();
      std::erase_if(insts, [&](const Inst& in) {
        if (in.op == Op::Yield || has_effects(in)) return false;
        return std::none_of(in.results.begin(), in.results.end(), [&](ValueId r) { return uses[r] > 0; });
      });
      changed |= insts.size() != n;
      for (Inst& in : insts)
        for (Region& r : in.regions) sweep(r.body);
    };
    sweep(k.body.body);
  }
}

}  // namespace palladium::ir
