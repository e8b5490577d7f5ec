// Interpreter: the program loop, control flow, and memory ops with their checks.
#include "backends/interp/interpreter.h"

#include <iostream>
#include <sstream>

#include "backends/common/debug_print.h"
#include "backends/interp/tile.h"
#include "palladium/error.h"

namespace palladium::interp {
namespace {

constexpr int64_t kAtomicWriter = -2;  // an element written by atomics from several programs

struct Memory {
  const ir::RefParam* param = nullptr;
  char* data = nullptr;
  std::vector<int64_t> strides;       // element strides of the array
  std::vector<size_t> array_dim;      // array dimension of each ref (kernel-visible) dimension
  std::vector<uint8_t>* written = nullptr;  // outputs: element written by some program
  std::vector<int64_t>* writer = nullptr;   // outputs: linear id of the program that wrote it
};

class Machine {
 public:
  Machine(const ir::Kernel& k, const std::vector<Array>& inputs, std::vector<Array>& outputs)
      : k_(k), env_(k.types.size()) {
    written_.resize(static_cast<size_t>(k.num_outputs()));
    writer_.resize(static_cast<size_t>(k.num_outputs()));
    for (const ir::RefParam& p : k.refs) {
      Memory m;
      m.param = &p;
      Array& a = p.is_output ? outputs[static_cast<size_t>(p.operand)] : const_cast<Array&>(inputs[static_cast<size_t>(p.operand)]);
      PL_ASSERT(a.shape() == p.array_shape && a.dtype() == p.dtype, "operand type differs from the traced type");
      m.data = static_cast<char*>(a.data());
      m.strides = row_major_strides(p.array_shape);
      for (size_t d = 0; d < p.squeezed.size(); ++d)
        if (!p.squeezed[d]) m.array_dim.push_back(d);
      if (p.is_output) {
        bool aliased = false;
        for (auto [in, out] : k.aliases) aliased = aliased || out == p.operand;
        const size_t o = static_cast<size_t>(p.operand);
        written_[o].assign(static_cast<size_t>(numel(p.array_shape)), aliased ? 1 : 0);
        writer_[o].assign(static_cast<size_t>(numel(p.array_shape)), -1);
        m.written = &written_[o];
        m.writer = &writer_[o];
      }
      mem_.push_back(std::move(m));
    }
  }

  // Grid order is row-major, so the programs that differ only along sequential axes run in their
  // order here, as the compiled backends run them.
  void run() {
    const int64_t total = numel(k_.grid);
    for (linear_ = 0; linear_ < total; ++linear_) {
      program_ = backend::program_coordinates(linear_, k_.grid);
      group_ = group_of(linear_);
      region(k_.body);
    }
  }

 private:
  [[noreturn]] void fail(const ir::Inst& in, const std::string& msg) const {
    std::ostringstream os;
    os << "pallas_call '" << k_.name << "', program (";
    for (size_t d = 0; d < program_.size(); ++d) os << (d ? ", " : "") << program_[d];
    os << "), op '" << ir::op_name(in.op) << "': " << msg;
    throw Error(os.str());
  }

  Tile& at(ir::ValueId v) { return env_[static_cast<size_t>(v)]; }

  // The programs that run one after another on one worker: those with the same coordinates along
  // the parallel axes. Identified by the linear id of the first of them.
  int64_t group_of(int64_t linear) const {
    if (!k_.any_sequential()) return linear;
    std::vector<int64_t> c = backend::program_coordinates(linear, k_.grid);
    int64_t g = 0;
    for (size_t d = 0; d < c.size(); ++d) g = g * k_.grid[d] + (k_.is_sequential(d) ? 0 : c[d]);
    return g;
  }
  bool same_group(int64_t writer) const { return writer == linear_ || (writer >= 0 && group_of(writer) == group_); }
  std::string race_hint() const {
    return k_.any_sequential() ? " (only programs that differ along sequential axes alone run in order)"
                               : " (programs of a parallel grid may run at once; an axis that accumulates into its "
                                 "output block is marked arbitrary in CallOptions::dimension_semantics)";
  }

  int64_t scalar(const ir::Inst& in, ir::ValueId v, const char* what) {
    const Tile& t = at(v);
    if (t.any_poison()) fail(in, std::string(what) + " is computed from poison (edge-block padding, or masked-off lanes of a load without `other`)");
    return t.scalar_int();
  }

  // Runs a region; returns the values its yield names.
  std::vector<Tile> region(const ir::Region& r) {
    for (const ir::Inst& in : r.body) {
      if (in.op == ir::Op::Yield) {
        std::vector<Tile> out;
        for (ir::ValueId v : in.operands) out.push_back(at(v));
        return out;
      }
      inst(in);
    }
    return {};
  }

  void bind(const ir::Region& r, size_t first, std::vector<Tile>& values) {
    for (size_t a = 0; a < values.size(); ++a) at(r.args[first + a]) = std::move(values[a]);
  }

  void inst(const ir::Inst& in) {
    const Fail on_fail = [&](const std::string& m) { fail(in, m); };
    auto operand = [&](size_t i) -> const Tile& { return at(in.operands[i]); };
    switch (ir::op_family(in.op)) {
      case ir::Family::Leaf: at(in.results[0]) = eval_leaf(in, k_.type(in.results[0]), program_, k_.grid); return;
      case ir::Family::Unary: at(in.results[0]) = eval_unary(in.op, operand(0)); return;
      case ir::Family::Binary: at(in.results[0]) = eval_binary(in.op, operand(0), operand(1), on_fail); return;
      case ir::Family::Compare: at(in.results[0]) = eval_compare(in.op, operand(0), operand(1)); return;
      case ir::Family::Select: at(in.results[0]) = eval_select(operand(0), operand(1), operand(2)); return;
      case ir::Family::Cast:
        at(in.results[0]) = in.op == ir::Op::BitcastConvert ? eval_bitcast(operand(0), k_.type(in.results[0]).dtype)
                                                            : eval_cast(operand(0), k_.type(in.results[0]).dtype);
        return;
      case ir::Family::Layout:
        if (in.op == ir::Op::Broadcast) at(in.results[0]) = eval_broadcast(operand(0), k_.type(in.results[0]).shape, in.ints);
        else if (in.op == ir::Op::Reshape) at(in.results[0]) = eval_reshape(operand(0), k_.type(in.results[0]).shape);
        else at(in.results[0]) = eval_transpose(operand(0), in.ints);
        return;
      case ir::Family::Reduce: at(in.results[0]) = eval_reduce(in.op, operand(0), static_cast<int>(in.i0)); return;
      case ir::Family::Scan: at(in.results[0]) = eval_cumsum(operand(0), static_cast<int>(in.i0)); return;
      case ir::Family::Dot:
        at(in.results[0]) = eval_dot(operand(0), operand(1), in.i0 != 0, in.i1 != 0, k_.type(in.results[0]).dtype);
        return;
      case ir::Family::Memory: memory(in); return;
      case ir::Family::Control: control(in); return;
      case ir::Family::Effect: debug_print(in); return;
    }
  }

  void control(const ir::Inst& in) {
    if (in.op == ir::Op::For) {
      const int64_t lo = scalar(in, in.operands[0], "the loop's lower bound");
      const int64_t hi = scalar(in, in.operands[1], "the loop's upper bound");
      const ir::Region& body = in.regions[0];
      const DType index_type = k_.type(body.args[0]).dtype;
      std::vector<Tile> carries;
      for (size_t i = 2; i < in.operands.size(); ++i) carries.push_back(at(in.operands[i]));
      for (int64_t i = lo; i < hi; ++i) {
        Tile idx = Tile::make(index_type, {});
        idx.i[0] = i;
        at(body.args[0]) = std::move(idx);
        bind(body, 1, carries);
        carries = region(body);
      }
      for (size_t r = 0; r < in.results.size(); ++r) at(in.results[r]) = std::move(carries[r]);
    } else if (in.op == ir::Op::While) {
      std::vector<Tile> carries;
      for (ir::ValueId v : in.operands) carries.push_back(at(v));
      while (true) {
        std::vector<Tile> copy = carries;
        bind(in.regions[0], 0, copy);
        Tile pred = region(in.regions[0]).at(0);
        if (pred.any_poison()) fail(in, "the loop condition is computed from poison (edge-block padding, or masked-off lanes of a load without `other`)");
        if (!pred.i[0]) break;
        bind(in.regions[1], 0, carries);
        carries = region(in.regions[1]);
      }
      for (size_t r = 0; r < in.results.size(); ++r) at(in.results[r]) = std::move(carries[r]);
    } else if (in.op == ir::Op::If) {
      const bool taken = scalar(in, in.operands[0], "the cond predicate") != 0;
      std::vector<Tile> out = region(in.regions[taken ? 0 : 1]);
      for (size_t r = 0; r < in.results.size(); ++r) at(in.results[r]) = std::move(out[r]);
    }
  }

  void debug_print(const ir::Inst& in) {
    std::vector<Array> values;
    for (ir::ValueId v : in.operands) values.push_back(at(v).to_array());
    std::cout << backend::format_debug_line(k_.name, program_, in.text, values) << std::flush;
  }

  // Loads, stores and atomics: walk every selected element of the block.
  void memory(const ir::Inst& in) {
    const Memory& m = mem_[static_cast<size_t>(in.i0)];
    const ir::RefParam& p = *m.param;
    const size_t rank = in.index.size();
    size_t next = rank;
    const Tile* value = in.op == ir::Op::Load ? nullptr : &at(in.operands[next++]);
    const Tile* swap_in = in.op == ir::Op::AtomicCas ? &at(in.operands[next++]) : nullptr;  // cas: value is cmp
    const Tile* mask = (in.i1 & ir::kHasMask) ? &at(in.operands[next++]) : nullptr;
    const Tile* other = (in.i1 & ir::kHasOther) ? &at(in.operands[next++]) : nullptr;
    if (mask && mask->any_poison()) fail(in, "the mask is computed from poison (edge-block padding, or masked-off lanes of a load without `other`)");

    // A gather access walks its index tiles' shape; a slice access walks the selection.
    const bool gather = (in.i1 & ir::kGather) != 0;
    std::vector<int64_t> start(rank), size(rank), stride(rank), origin(p.array_shape.size());
    std::vector<const Tile*> index_tile(rank, nullptr);
    for (size_t d = 0; d < rank; ++d) {
      if (in.index[d].gather) {
        index_tile[d] = &at(in.operands[d]);
        continue;
      }
      start[d] = scalar(in, in.operands[d], "an index");
      size[d] = in.index[d].scalar ? 1 : in.index[d].size;
      stride[d] = in.index[d].stride;
    }
    for (size_t a = 0; a < origin.size(); ++a) {
      origin[a] = scalar(in, p.origin[a], "a block origin (index_map)");
      // A block wholly outside its array is an index_map bug, not an edge block.
      if (origin[a] >= p.array_shape[a] || origin[a] + p.block_shape[a] <= 0) {
        std::ostringstream os;
        os << "the index_map of ref " << p.name << " places its block at element " << origin[a] << " of dimension " << a
           << ", entirely outside the array of shape " << shape_str(p.array_shape);
        fail(in, os.str());
      }
    }

    const ir::Type& slot = in.op == ir::Op::Store ? k_.type(in.operands[rank]) : k_.type(in.results[0]);
    Tile result = Tile::make(p.dtype, slot.shape);
    const Shape walk = gather ? slot.shape : size;
    const int64_t n = numel(walk);
    const int64_t isz = itemsize(p.dtype);
    std::vector<int64_t> k(walk.size(), 0);
    for (int64_t e = 0; e < n; ++e) {
      const bool active = !mask || mask->i[static_cast<size_t>(e)] != 0;
      if (active) {
        // Block-local bounds, then array bounds (edge padding), then the element's offset.
        bool padding = false;
        int64_t flat = 0;
        for (size_t d = 0; d < rank; ++d) {
          if (index_tile[d] && index_tile[d]->poisoned(e))
            fail(in, "an index is computed from poison (edge-block padding, or masked-off lanes of a load without `other`)");
          const int64_t local = index_tile[d] ? index_tile[d]->i[static_cast<size_t>(e)]
                                : gather   ? start[d]
                                           : start[d] + k[d] * stride[d];
          if (local < 0 || local >= p.ref_shape[d]) {
            std::ostringstream os;
            os << "index " << local << " is out of bounds for dimension " << d << " of ref " << p.name << " with shape "
               << shape_str(p.ref_shape);
            fail(in, os.str());
          }
          const size_t a = m.array_dim[d];
          const int64_t global = origin[a] + local;
          if (global < 0 || global >= p.array_shape[a]) padding = true;
          flat += global * m.strides[a];
        }
        for (size_t a = 0; a < p.squeezed.size(); ++a) {
          if (!p.squeezed[a]) continue;
          if (origin[a] < 0 || origin[a] >= p.array_shape[a]) padding = true;
          flat += origin[a] * m.strides[a];
        }
        access(in, m, e, flat * isz, flat, padding, value, swap_in, result, k);
      } else if (in.op == ir::Op::Load) {
        if (other) {
          if (result.floating()) result.f[static_cast<size_t>(e)] = other->f[static_cast<size_t>(e)];
          else result.i[static_cast<size_t>(e)] = other->i[static_cast<size_t>(e)];
          if (other->poisoned(e)) result.set_poison(e);
        } else {
          result.set_poison(e);  // a masked-off lane without `other` is undefined
        }
      }
      for (size_t d = walk.size(); d-- > 0;)
        if (++k[d] < walk[d]) break;
        else k[d] = 0;
    }
    if (in.op != ir::Op::Store) at(in.results[0]) = std::move(result);
  }

  void access(const ir::Inst& in, const Memory& m, int64_t e, int64_t byte, int64_t flat, bool padding,
              const Tile* value, const Tile* swap_in, Tile& result, const std::vector<int64_t>& k) {
    const ir::RefParam& p = *m.param;
    auto where = [&] {
      std::ostringstream os;
      os << "element (";
      for (size_t d = 0; d < k.size(); ++d) os << (d ? ", " : "") << k[d];
      os << ") of the selection in ref " << p.name;
      return os.str();
    };
    if (in.op == ir::Op::Load) {
      if (padding) { result.set_poison(e); return; }
      if (p.is_output && !(*m.written)[static_cast<size_t>(flat)])
        fail(in, "reads " + where() + ", output memory that nothing has written");
      if (p.is_output) {
        const int64_t w = (*m.writer)[static_cast<size_t>(flat)];
        if (w != -1 && !same_group(w))
          fail(in, "reads " + where() + ", which " + (w == kAtomicWriter ? std::string("several programs") : "program " + std::to_string(w)) +
                       " (row-major linear id) wrote" + race_hint());
      }
      if (result.floating()) result.f[static_cast<size_t>(e)] = load_as_double(p.dtype, m.data + byte);
      else result.i[static_cast<size_t>(e)] = load_as_int64(p.dtype, m.data + byte);
      return;
    }
    if (padding) {
      if (in.op != ir::Op::Store) result.set_poison(e);
      return;  // writes past the array's end are dropped
    }
    if (value->poisoned(e) || (swap_in && swap_in->poisoned(e))) fail(in, "stores a value computed from poison (edge-block padding, or masked-off lanes of a load without `other`) into " + where());
    int64_t& w = (*m.writer)[static_cast<size_t>(flat)];
    const bool atomic = in.op != ir::Op::Store;
    if (!atomic && w != -1 && !same_group(w))
      fail(in, "writes " + where() + ", which " + (w == kAtomicWriter ? std::string("several programs") : "program " + std::to_string(w)) +
                   " (row-major linear id) also wrote" + race_hint());
    w = atomic ? (w == -1 || same_group(w) ? linear_ : kAtomicWriter) : linear_;
    if (atomic) {
      const bool was_written = (*m.written)[static_cast<size_t>(flat)];
      if (!was_written) fail(in, "updates " + where() + ", output memory that nothing has written");
      const size_t i = static_cast<size_t>(e);
      if (value->floating()) {
        const double old = load_as_double(p.dtype, m.data + byte), v = value->f[i];
        result.f[i] = old;
        const double nv = in.op == ir::Op::AtomicAdd ? old + v
                          : in.op == ir::Op::AtomicMax ? std::max(old, v)
                          : in.op == ir::Op::AtomicMin ? std::min(old, v)
                                                       : v;  // xchg
        store_from_double(p.dtype, m.data + byte, nv);
      } else {
        const int64_t old = load_as_int64(p.dtype, m.data + byte), v = value->i[i];
        result.i[i] = old;
        int64_t nv = v;  // xchg
        switch (in.op) {
          case ir::Op::AtomicAdd: nv = static_cast<int64_t>(static_cast<uint64_t>(old) + static_cast<uint64_t>(v)); break;
          case ir::Op::AtomicMax: nv = std::max(old, v); break;
          case ir::Op::AtomicMin: nv = std::min(old, v); break;
          case ir::Op::AtomicAnd: nv = old & v; break;
          case ir::Op::AtomicOr: nv = old | v; break;
          case ir::Op::AtomicXor: nv = old ^ v; break;
          case ir::Op::AtomicCas: nv = old == v ? swap_in->i[i] : old; break;
          default: break;
        }
        store_from_int64(p.dtype, m.data + byte, nv);
      }
    } else if (value->floating()) {
      store_from_double(p.dtype, m.data + byte, value->f[static_cast<size_t>(e)]);
    } else {
      store_from_int64(p.dtype, m.data + byte, value->i[static_cast<size_t>(e)]);
    }
    (*m.written)[static_cast<size_t>(flat)] = 1;
  }

  const ir::Kernel& k_;
  std::vector<Tile> env_;
  std::vector<Memory> mem_;
  std::vector<std::vector<uint8_t>> written_;
  std::vector<std::vector<int64_t>> writer_;
  std::vector<int64_t> program_;
  int64_t linear_ = 0;
  int64_t group_ = 0;
};

class InterpretedKernel final : public backend::Executable {
 public:
  explicit InterpretedKernel(const ir::Kernel& k) : kernel_(k) {}
  void run(const std::vector<Array>& inputs, std::vector<Array>& outputs) override {
    backend::allocate_host_outputs(kernel_, outputs);
    Machine(kernel_, inputs, outputs).run();
  }

 private:
  ir::Kernel kernel_;
};

class InterpreterBackend final : public backend::Backend {
 public:
  const char* name() const override { return "interpret"; }
  bool runs_on_host() const override { return true; }
  std::unique_ptr<backend::Executable> compile(const ir::Kernel& k, const backend::CompileOptions&) override {
    return std::make_unique<InterpretedKernel>(k);
  }
};

}  // namespace

backend::Backend& backend() {
  static InterpreterBackend b;
  return b;
}

}  // namespace palladium::interp
