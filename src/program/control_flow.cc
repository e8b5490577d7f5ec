// scan, while_loop and cond at run time. A scan reads x[t] with one slice kernel a step and stacks
// its per-step results at the end; while_loop and cond read their predicate on the host.
#include "program/control_flow.h"

#include <algorithm>

#include "palladium/device.h"
#include "palladium/numpy.h"
#include "program/executor.h"

namespace palladium::program {

namespace {

bool host_truth(const Array& pred) {
  const Array h = to_host(pred);
  return h.get(0) != 0.0;
}

std::vector<Array> slice_vec(const std::vector<Array>& v, size_t from, size_t n) {
  return std::vector<Array>(v.begin() + static_cast<std::ptrdiff_t>(from),
                            v.begin() + static_cast<std::ptrdiff_t>(from + n));
}

}  // namespace

std::vector<Array> run_control(const Eqn& e, const std::vector<std::shared_ptr<Executable>>& regions,
                               const std::vector<Array>& ins) {
  const Params& q = e.params;
  switch (e.prim) {
    case Prim::scan: {
      // ins: consts (count2), carries (count), xs; outs: carries, ys. axis = length, flag = reverse.
      const size_t n_const = static_cast<size_t>(q.count2), n_carry = static_cast<size_t>(q.count);
      const std::vector<Array> consts = slice_vec(ins, 0, n_const);
      std::vector<Array> carry = slice_vec(ins, n_const, n_carry);
      const std::vector<Array> xs = slice_vec(ins, n_const + n_carry, ins.size() - n_const - n_carry);
      const size_t n_ys = e.outs.size() - n_carry;
      std::vector<std::vector<Array>> ys(n_ys);
      const int64_t length = q.axis;
      for (int64_t it = 0; it < length; ++it) {
        const int64_t t = q.flag ? length - 1 - it : it;
        std::vector<Array> args = consts;
        args.insert(args.end(), carry.begin(), carry.end());
        for (const Array& x : xs) args.push_back(lax::index(x, t));
        std::vector<Array> outs = regions[0]->run(args);
        carry = slice_vec(outs, 0, n_carry);
        for (size_t j = 0; j < n_ys; ++j) ys[j].push_back(outs[n_carry + j]);
      }
      std::vector<Array> result = carry;
      const Program& body = *q.regions[0];
      for (size_t j = 0; j < n_ys; ++j) {
        if (q.flag) std::reverse(ys[j].begin(), ys[j].end());
        if (length == 0) {
          Type t = body.type(body.outputs[n_carry + j]);
          Shape s{0};
          s.insert(s.end(), t.shape.begin(), t.shape.end());
          result.push_back(Array(s, t.dtype));
        } else {
          result.push_back(jnp::stack(ys[j]));
        }
      }
      return result;
    }
    case Prim::while_loop: {
      // ins: cond consts (count), body consts (count2), carries.
      const size_t nc = static_cast<size_t>(q.count), nb = static_cast<size_t>(q.count2);
      const std::vector<Array> cconsts = slice_vec(ins, 0, nc), bconsts = slice_vec(ins, nc, nb);
      std::vector<Array> carry = slice_vec(ins, nc + nb, ins.size() - nc - nb);
      for (;;) {
        std::vector<Array> cargs = cconsts;
        cargs.insert(cargs.end(), carry.begin(), carry.end());
        if (!host_truth(regions[0]->run(cargs).at(0))) break;
        std::vector<Array> bargs = bconsts;
        bargs.insert(bargs.end(), carry.begin(), carry.end());
        carry = regions[1]->run(bargs);
      }
      return carry;
    }
    case Prim::cond: {
      // ins: pred, true-branch operands (count), false-branch operands.
      const size_t nt = static_cast<size_t>(q.count);
      if (host_truth(ins[0])) return regions[0]->run(slice_vec(ins, 1, nt));
      return regions[1]->run(slice_vec(ins, 1 + nt, ins.size() - 1 - nt));
    }
    default:
      throw InternalError(std::string("run_control: ") + prim_name(e.prim) + " is not control flow");
  }
}

}  // namespace palladium::program
