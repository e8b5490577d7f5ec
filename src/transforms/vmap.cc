// vmap: the function is traced on one example, then its program is re-bound equation by
// equation with each primitive's batching rule (prims.def), the batch always on axis 0.
#include <set>

#include "program/families.h"
#include "program/trace.h"
#include "transforms/transforms.h"

namespace palladium::program {

namespace {

using Arrays = std::vector<Array>;

Array move_to_front(const Array& x, int64_t axis) {
  if (axis == 0) return x;
  std::vector<int64_t> perm{axis};
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (d != axis) perm.push_back(d);
  return jnp::transpose(x, perm);
}

Array batched_broadcast(const Array& x, int64_t size) {
  Shape s{size};
  s.insert(s.end(), x.shape().begin(), x.shape().end());
  return jnp::broadcast_to(jnp::reshape(x, [&] { Shape r{1}; r.insert(r.end(), x.shape().begin(), x.shape().end()); return r; }()), s);
}

Arrays batch_program(const Program& p, const Arrays& ins, const std::vector<bool>& batched, int64_t size) {
  std::vector<Array> env(p.types.size());
  std::vector<bool> is_b(p.types.size(), false);
  for (size_t i = 0; i < ins.size(); ++i) {
    env[static_cast<size_t>(p.inputs[i])] = ins[i];
    is_b[static_cast<size_t>(p.inputs[i])] = batched[i];
  }
  for (size_t i = 0; i < p.consts.size(); ++i) env[static_cast<size_t>(p.const_vars[i])] = p.consts[i];
  for (const Eqn& e : p.eqns) {
    Arrays a;
    std::vector<bool> b;
    bool any = false;
    for (int v : e.ins) {
      a.push_back(env[static_cast<size_t>(v)]);
      b.push_back(is_b[static_cast<size_t>(v)]);
      any = any || b.back();
    }
    std::vector<bool> ob(e.outs.size(), false);
    Arrays o = any ? batch_rule(e.prim)(e, a, b, size, ob) : bind_eqn(e, a);
    for (size_t k = 0; k < e.outs.size(); ++k) {
      env[static_cast<size_t>(e.outs[k])] = o[k];
      is_b[static_cast<size_t>(e.outs[k])] = any && ob[k];
    }
  }
  Arrays outs;
  for (int v : p.outputs) {
    const Array& x = env[static_cast<size_t>(v)];
    outs.push_back(is_b[static_cast<size_t>(v)] ? x : batched_broadcast(x, size));
  }
  return outs;
}

}  // namespace

std::vector<Array> vmap_program(const Program& p, const std::vector<Array>& ins, const std::vector<bool>& batched,
                                int64_t size) {
  return batch_program(p, ins, batched, size);
}

}  // namespace palladium::program

namespace palladium::detail {

std::vector<Array> vmap_flat(const FlatFn& f, const std::vector<Array>& args, const std::vector<int64_t>& in_axes) {
  using namespace program;
  int64_t size = -1;
  std::vector<Array> moved;
  std::vector<Type> per_example;
  std::vector<bool> batched;
  for (size_t i = 0; i < args.size(); ++i) {
    const Array& x = args[i];
    if (in_axes[i] < 0) {
      moved.push_back(x);
      per_example.push_back({x.shape(), x.dtype()});
      batched.push_back(false);
      continue;
    }
    int64_t ax = in_axes[i];
    PL_CHECK(ax < x.ndim(), "vmap: in_axes ", ax, " is out of range for argument leaf ", i, " of shape ",
             shape_str(x.shape()));
    const int64_t n = x.shape()[static_cast<size_t>(ax)];
    PL_CHECK(size < 0 || n == size, "vmap: mapped axes have different sizes (", size, " and ", n, ")");
    size = n;
    moved.push_back(move_to_front(x, ax));
    Shape s = x.shape();
    s.erase(s.begin() + ax);
    per_example.push_back({s, x.dtype()});
    batched.push_back(true);
  }
  PL_CHECK(size >= 0, "vmap: no argument is mapped (every in_axes entry is None)");
  Traced tr = trace_flat("vmap", f, per_example, device_of(args));
  moved.insert(moved.end(), tr.captured.begin(), tr.captured.end());
  batched.insert(batched.end(), tr.captured.size(), false);
  return vmap_program(tr.program, moved, batched, size);
}

}  // namespace palladium::detail
