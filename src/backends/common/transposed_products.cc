#include "backends/common/transposed_products.h"

#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace palladium::backend {
namespace {

using ir::Inst;
using ir::Op;
using ir::Region;
using ir::ValueId;

// How the transpose of a value computed by an op family is computed. Interior rules rewrite the
// instruction in place (its value is then the transpose; every reader must be in the group);
// leaf rules add a transposed twin beside the instruction, which keeps its other readers.
enum class Rule {
  None,         // not transposable: the group is abandoned
  Elementwise,  // unary, binary, compare, select, cast: the same op on the operands' transposes
  Swapped,      // dot: (A B)^T = B^T A^T, the operands swapped and their transpose flags flipped
  Splat,        // const: the same constant in the swapped shape
  Counted,      // iota: counting along the other dimension
  Broadcast,    // broadcast of a scalar, a vector or a tile with a unit dimension: the operand's transpose broadcast
};

Rule rule_for(const Inst& in) {
  switch (ir::op_family(in.op)) {
    case ir::Family::Unary:
    case ir::Family::Binary:
    case ir::Family::Compare:
    case ir::Family::Select:
    case ir::Family::Cast: return Rule::Elementwise;
    case ir::Family::Dot: return Rule::Swapped;
    case ir::Family::Leaf: return in.op == Op::Const ? Rule::Splat : in.op == Op::Iota ? Rule::Counted : Rule::None;
    case ir::Family::Layout: return in.op == Op::Broadcast ? Rule::Broadcast : Rule::None;
    default: return Rule::None;
  }
}

bool is_leaf(Rule r) { return r == Rule::Splat || r == Rule::Counted || r == Rule::Broadcast; }

bool is_transpose_2d(const Inst& in) { return in.op == Op::Transpose && in.ints == std::vector<int64_t>{1, 0}; }

class TransposeProducts {
 public:
  explicit TransposeProducts(const ir::Kernel& k) : k_(k) {}

  ir::Kernel run() {
    index(k_.body);
    std::vector<const Inst*> seeds;
    for (const auto& [v, def] : def_)
      if (is_transpose_2d(*def) && feeds_dots_only(v)) seeds.push_back(def);
    if (seeds.empty()) return k_;
    // All seeds together first (the attention's p^T and ds^T share p), then one at a time.
    if (!try_group(seeds))
      for (const Inst* s : seeds) try_group({s});
    if (interior_.empty()) return k_;
    ir::Kernel out = k_;
    rewrite(out);
    return out;
  }

 private:
  void index(const Region& r) {
    for (const Inst& in : r.body) {
      for (ValueId v : in.results) def_[v] = &in;
      for (ValueId v : in.operands) users_[v].push_back(&in);
      for (const Region& s : in.regions) index(s);
    }
  }

  bool feeds_dots_only(ValueId v) const {
    auto it = users_.find(v);
    if (it == users_.end()) return false;
    for (const Inst* u : it->second)
      if (u->op != Op::Dot || u->operands[0] != v || u->operands[1] == v || u->i0 != 0) return false;
    return true;
  }

  bool rank2(ValueId v) const { return k_.type(v).shape.size() == 2; }

  // The group of values behind `seeds`: accepted when every interior value is read only inside
  // the group or by the seeds, and every value has a rule.
  bool try_group(const std::vector<const Inst*>& seeds) {
    std::set<ValueId> interior, leaves;
    std::set<const Inst*> seed_set(seeds.begin(), seeds.end());
    std::vector<ValueId> work;
    for (const Inst* s : seeds) work.push_back(s->operands[0]);
    while (!work.empty()) {
      const ValueId v = work.back();
      work.pop_back();
      if (interior.count(v) || leaves.count(v) || interior_.count(v) || leaves_.count(v)) continue;
      auto d = def_.find(v);
      if (d == def_.end() || !rank2(v)) return false;  // a region argument (a loop carry) or not a tile
      const Inst& in = *d->second;
      const Rule rule = rule_for(in);
      if (rule == Rule::None || in.results.size() != 1) return false;
      if (is_leaf(rule)) {
        if (rule == Rule::Broadcast && !broadcast_transposable(in)) return false;
        leaves.insert(v);
        continue;
      }
      interior.insert(v);
      if (rule == Rule::Elementwise)
        for (ValueId o : in.operands) {
          if (k_.type(o).shape != k_.type(v).shape) return false;
          work.push_back(o);
        }
    }
    // Closed: every reader of an interior value is a group instruction or a seed.
    for (ValueId v : interior)
      for (const Inst* u : users_[v]) {
        if (seed_set.count(u)) continue;
        if (u->results.size() != 1 || !interior.count(u->results[0]) || rule_for(*u) != Rule::Elementwise) return false;
      }
    interior_.insert(interior.begin(), interior.end());
    leaves_.insert(leaves.begin(), leaves.end());
    for (const Inst* s : seeds) seeds_[s->results[0]] = s->operands[0];
    return true;
  }

  // A broadcast into a 2-D tile whose operand transposes by a reshape: a scalar, a vector, or a
  // tile with a unit dimension (the attention's lse[:, None]).
  bool broadcast_transposable(const Inst& in) const {
    const Shape& s = k_.type(in.operands[0]).shape;
    return s.size() < 2 || s[0] == 1 || s[1] == 1;
  }

  ValueId new_value(ir::Kernel& out, ir::Type t) {
    out.types.push_back(std::move(t));
    return static_cast<ValueId>(out.types.size() - 1);
  }

  static Shape swapped(const Shape& s) { return {s[1], s[0]}; }

  // The twin of leaf `in` (its result transposed), appended to `body`.
  void add_twin(ir::Kernel& out, const Inst& in, std::vector<Inst>& body) {
    const ValueId v = in.results[0];
    const ir::Type t{out.type(v).dtype, swapped(out.type(v).shape)};
    const ValueId twin = new_value(out, t);
    twin_[v] = twin;
    Inst copy = in;
    copy.results = {twin};
    if (in.op == Op::Iota) copy.i0 = 1 - in.i0;
    if (in.op == Op::Broadcast) {
      const ValueId x = in.operands[0];
      const Shape xs = out.type(x).shape;
      if (xs.size() == 1) {
        copy.ints = {1 - in.ints[0]};
      } else if (xs.size() == 2 && xs[0] != xs[1]) {  // (n, 1) <-> (1, n): a reshape is the transpose
        // Of the vector itself where x reshapes one (lse[:, None]), so backends see a vector's reshape.
        auto d = def_.find(x);
        const ValueId source = d != def_.end() && d->second->op == Op::Reshape && out.type(d->second->operands[0]).shape.size() == 1
                                   ? d->second->operands[0]
                                   : x;
        const ValueId r = new_value(out, {out.type(x).dtype, swapped(xs)});
        body.push_back(Inst{.op = Op::Reshape, .results = {r}, .operands = {source}});
        copy.operands = {r};
      }
    }
    body.push_back(std::move(copy));
  }

  void rewrite_region(ir::Kernel& out, Region& r) {
    std::vector<Inst> body;
    body.reserve(r.body.size());
    for (Inst& in : r.body) {
      for (Region& s : in.regions) rewrite_region(out, s);
      if (in.results.size() == 1 && seeds_.count(in.results[0])) continue;  // the transpose vanishes
      for (ValueId& o : in.operands)
        if (auto s = seeds_.find(o); s != seeds_.end()) o = s->second;
      const bool interior = in.results.size() == 1 && interior_.count(in.results[0]);
      const bool leaf = in.results.size() == 1 && leaves_.count(in.results[0]);
      if (interior) {
        const ValueId v = in.results[0];
        out.types[static_cast<size_t>(v)].shape = swapped(out.type(v).shape);
        if (in.op == Op::Dot) {
          std::swap(in.operands[0], in.operands[1]);
          const int64_t ta = in.i0;
          in.i0 = in.i1 ? 0 : 1;
          in.i1 = ta ? 0 : 1;
        } else {
          for (ValueId& o : in.operands)
            if (auto t = twin_.find(o); t != twin_.end()) o = t->second;
        }
      }
      body.push_back(std::move(in));
      if (leaf) add_twin(out, body.back(), body);
    }
    r.body = std::move(body);
  }

  void rewrite(ir::Kernel& out) {
    rewrite_region(out, out.body);
    ir::remove_dead_code(out);  // the original leaves the group no longer reads (lse[:, None]'s reshape)
  }

  const ir::Kernel& k_;
  std::map<ValueId, const Inst*> def_;
  std::map<ValueId, std::vector<const Inst*>> users_;
  std::set<ValueId> interior_, leaves_;
  std::map<ValueId, ValueId> seeds_;  // a vanishing transpose's result -> its (now transposed) operand
  std::map<ValueId, ValueId> twin_;   // a leaf -> its transposed twin
};

}  // namespace

ir::Kernel transpose_register_products(const ir::Kernel& kernel) { return TransposeProducts(kernel).run(); }

}  // namespace palladium::backend
