// pallas_call: describe, trace once per input signature, compile for a backend, cache, run.
#include <iostream>
#include <map>
#include <mutex>

#include "backends/backend.h"
#include "core/grid_mapping.h"
#include "palladium/device.h"
#include "trace/context.h"

namespace palladium::detail {

struct CallImpl::Cache {
  struct Entry {
    std::unique_ptr<backend::Executable> exe;
    bool runs_on_host = false;  // the backend reads inputs through host pointers
    std::vector<ShapeDtype> outputs;  // the results, then the scratch buffers
    size_t num_scratch = 0;
    std::vector<std::pair<int, int>> aliases;
  };
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Entry>> entries;
  int traces = 0;
};

namespace {

std::string label(bool is_output, size_t i) { return (is_output ? "out_specs[" : "in_specs[") + std::to_string(i) + "]"; }

// Whether a callable of this arity mask accepts n arguments (kAnyArity accepts any number).
bool accepts(uint32_t arity_mask, size_t n) { return arity_mask == kAnyArity || (n < 32 && (arity_mask & (1u << n))); }

// The argument counts a mask accepts, as "1 or 3", or `none` if it accepts no count.
std::string arity_list(uint32_t arity_mask, const std::string& none) {
  std::string takes;
  for (int n = 0; n < 32; ++n)
    if (arity_mask & (1u << n)) takes += (takes.empty() ? "" : " or ") + std::to_string(n);
  return takes.empty() ? none : takes;
}

void add_ref(ir::Kernel& kernel, ir::Builder& b, const std::vector<Value>& pids, bool is_output, size_t operand,
             const ShapeDtype& sd, const BlockSpec& spec, std::vector<Ref>& refs) {
  const std::string what = label(is_output, operand);
  const std::vector<BlockDim>& block = spec.block_shape();
  const Shape& shape = sd.shape;
  auto fail = [&](const std::string& msg) { b.fail("BlockSpec", what + ": " + msg); };
  if (block.size() != shape.size())
    fail("block shape has rank " + std::to_string(block.size()) + " but the array " + shape_str(shape) + " has rank " +
         std::to_string(shape.size()));
  ir::RefParam p;
  p.name = (is_output ? "o" : "x") + std::to_string(operand);
  p.is_output = is_output;
  p.operand = static_cast<int>(operand);
  p.dtype = sd.dtype;
  p.array_shape = shape;
  for (size_t d = 0; d < block.size(); ++d) {
    if (!block[d].squeezed && (block[d].size < 1 || block[d].size > shape[d]))
      fail("block shape " + std::to_string(block[d].size) + " in dimension " + std::to_string(d) +
           (block[d].size < 1 ? " is not positive" : " is larger than the array " + shape_str(shape)));
    p.block_shape.push_back(block[d].squeezed ? 1 : block[d].size);
    p.squeezed.push_back(block[d].squeezed);
    if (!block[d].squeezed) p.ref_shape.push_back(block[d].size);
  }
  if (!accepts(spec.arity_mask(), pids.size()))
    fail("index_map takes " + arity_list(spec.arity_mask(), "no valid number of") + " grid indices but the grid " +
         shape_str(kernel.grid) + " has rank " + std::to_string(pids.size()));
  Indexer idx = spec.index_map()(pids);
  if (idx.args.size() != shape.size())
    fail("index_map returned " + std::to_string(idx.args.size()) + " block indices for an array of rank " +
         std::to_string(shape.size()));
  for (size_t d = 0; d < idx.args.size(); ++d) {
    Value v;
    if (const int64_t* k = std::get_if<int64_t>(&idx.args[d].v)) v = Value(*k);
    else if (const Value* t = std::get_if<Value>(&idx.args[d].v)) v = *t;
    else fail("index_map entry " + std::to_string(d) + " must be an integer or a traced index, not a slice");
    if (!v.is_literal() && (!v.shape().empty() || !is_integer(v.dtype())))
      fail("index_map entry " + std::to_string(d) + " must be an integer scalar");
    Value origin = p.squeezed[d] ? v : v * block[d].size;
    p.origin.push_back(trace::as_value(origin, DType::int32, {}, "index_map"));
  }
  kernel.refs.push_back(std::move(p));
  refs.emplace_back(static_cast<int>(kernel.refs.size() - 1), kernel.refs.back().ref_shape, sd.dtype);
}

}  // namespace

std::string signature(const InputTypes& in, const std::string& backend_name) {
  std::string key = backend_name;
  for (const auto& t : in) key += "|" + (t ? std::string(dtype_name(t->dtype)) + shape_str(t->shape) : "none");
  return key;
}

std::string choose_backend(const CallOptions& o) {
  if (o.interpret) return "interpret";
  if (!o.backend.empty()) return o.backend;
  return backend::default_name();
}

InputTypes types_of(const std::vector<Array>& inputs) {
  InputTypes t;
  for (const Array& a : inputs) {
    if (a.defined()) t.push_back(ShapeDtype(a.shape(), a.dtype()));
    else t.push_back(std::nullopt);
  }
  return t;
}

namespace {

std::shared_ptr<CallImpl::Cache::Entry> entry_for(const CallImpl& call, const InputTypes& in) {
  const CallOptions& o = call.base().options;
  const std::string backend_name = choose_backend(o);
  const std::string key = signature(in, backend_name);
  CallImpl::Cache& cache = *call.cache;
  std::lock_guard<std::mutex> lock(cache.mu);
  if (auto it = cache.entries.find(key); it != cache.entries.end()) return it->second;
  backend::Backend* be = nullptr;
  try {
    be = &backend::get(backend_name);
  } catch (const Error& err) {
    throw Error("pallas_call '" + call.name() + "': " + err.what());
  }
  if (std::string why = be->unavailable_reason(); !why.empty())
    throw Error("pallas_call '" + call.name() + "': backend '" + backend_name + "' is unavailable: " + why);
  auto e = std::make_shared<CallImpl::Cache::Entry>();
  CallDesc d = describe(call, in);
  const ir::Kernel kernel = trace_kernel(call, d);
  ++cache.traces;
  e->outputs = d.outputs;
  e->num_scratch = d.num_scratch;
  for (const ir::RefParam& r : kernel.refs)  // run_scoped's buffers, after every other output
    if (r.is_output && r.operand >= static_cast<int>(d.outputs.size())) {
      e->outputs.emplace_back(r.array_shape, r.dtype);
      ++e->num_scratch;
    }
  e->aliases = d.aliases;
  if (o.debug) std::cout << "--- pallas_call '" << d.name << "' IR (" << backend_name << ") ---\n" << ir::print(kernel);
  e->exe = be->compile(kernel, {o.debug, o.compiler_params});
  e->runs_on_host = be->runs_on_host();
  cache.entries[key] = e;
  return e;
}

}  // namespace

namespace {
thread_local std::span<const Ref> current_prefetch_refs;

// The kernel whose body is being traced, for run_scoped's buffers: scratch refs (scratch_layout)
// appended after every other ref.
struct ScopedBuffers {
  ir::Kernel* kernel = nullptr;
  ir::Builder* builder = nullptr;
  const CallDesc* desc = nullptr;
  const std::vector<Value>* pids = nullptr;
  size_t next_output = 0;  // the output index of the next buffer
};
thread_local ScopedBuffers* current_scoped = nullptr;
}  // namespace

std::vector<Ref> scoped_buffers(const std::vector<ShapeDtype>& types) {
  ScopedBuffers* sb = current_scoped;
  if (!sb) throw Error("run_scoped: called outside a pallas_call kernel body");
  ir::Builder& b = *sb->builder;
  // Inside a loop or a conditional the buffers are the same ones at every entry: each is a
  // kernel-wide scratch buffer (its origin is the program's ids, defined at the top), and a scope's
  // buffers are dead when it ends, so reusing them is what allocating afresh would do.
  std::vector<Ref> refs;
  b.at_top_level([&] {
    for (const ShapeDtype& t : types) {
      b.check_shape("run_scoped", t.shape);
      const auto [array, spec] = scratch_layout(*sb->desc, t);
      const size_t o = sb->next_output++;
      add_ref(*sb->kernel, b, *sb->pids, true, o, array, spec, refs);
      sb->kernel->refs.back().name = "s" + std::to_string(o - sb->desc->num_results());
      sb->kernel->refs.back().scratch = true;
    }
  });
  return refs;
}

std::span<const Ref> scalar_prefetch_refs() { return current_prefetch_refs; }

ir::Kernel trace_kernel(const CallImpl& call, const CallDesc& d) {
  trace::Context ctx(d.name, d.grid, d.program_id_offset);
  ir::Kernel& kernel = ctx.kernel();
  ir::Builder& b = ctx.builder();
  kernel.aliases = d.aliases;
  kernel.sequential = d.sequential;
  std::vector<Value> pids;
  for (size_t a = 0; a < d.grid.size(); ++a) pids.push_back(trace::wrap(b.program_id(static_cast<int>(a))));
  std::vector<Ref> refs;
  // The scalar-prefetch inputs come first (whole arrays); the other refs' index maps read them.
  const size_t n_prefetch = static_cast<size_t>(d.num_prefetch);
  for (size_t i = 0; i < n_prefetch; ++i) add_ref(kernel, b, pids, false, i, *d.inputs[i], d.in_specs[i], refs);
  const std::vector<Ref> prefetch = refs;
  current_prefetch_refs = prefetch;
  struct Reset {
    ~Reset() { current_prefetch_refs = {}; }
  } reset;
  auto check_prefetch = [&](const BlockSpec& spec, const std::string& label) {
    if (spec.prefetch_refs() != 0 && spec.prefetch_refs() != d.num_prefetch)
      b.fail("BlockSpec", label + ": index_map takes " + std::to_string(spec.prefetch_refs()) +
                              " scalar-prefetch Refs but num_scalar_prefetch is " + std::to_string(d.num_prefetch));
  };
  for (size_t i = n_prefetch; i < d.inputs.size(); ++i) {
    if (!d.inputs[i]) { refs.emplace_back(); continue; }
    check_prefetch(d.in_specs[i], "in_specs[" + std::to_string(i - n_prefetch) + "]");
    add_ref(kernel, b, pids, false, i, *d.inputs[i], d.in_specs[i], refs);
  }
  kernel.num_inputs = static_cast<int>(kernel.refs.size());
  for (size_t o = 0; o < d.outputs.size(); ++o) {
    check_prefetch(d.out_specs[o], "out_specs[" + std::to_string(o) + "]");
    add_ref(kernel, b, pids, true, o, d.outputs[o], d.out_specs[o], refs);
    if (o >= d.num_results()) {  // scratch
      kernel.refs.back().name = "s" + std::to_string(o - d.num_results());
      kernel.refs.back().scratch = true;
    }
  }

  ScopedBuffers scoped{&kernel, &b, &d, &pids, d.outputs.size()};
  current_scoped = &scoped;
  struct ResetScoped {
    ~ResetScoped() { current_scoped = nullptr; }
  } reset_scoped;
  const KernelFn& fn = call.base().kernel;
  if (!accepts(fn.arity_mask, refs.size()))
    b.fail("call", "the kernel takes " + arity_list(fn.arity_mask, "an unsupported number of") +
                       " Refs but the call passes " + std::to_string(refs.size()) + " (" +
                       std::to_string(d.inputs.size()) + " inputs + " + std::to_string(d.num_results()) + " outputs" +
                       (d.num_scratch ? " + " + std::to_string(d.num_scratch) + " scratch" : std::string()) + ")");
  fn.fn(Refs(refs));
  b.finish();
  ir::verify(kernel);
  return std::move(kernel);
}

std::shared_ptr<CallImpl> make_call(KernelFn kernel, std::vector<ShapeDtype> out_shapes, CallOptions options) {
  auto c = std::make_shared<CallImpl>();
  c->kernel = std::move(kernel);
  c->out_shapes = std::move(out_shapes);
  c->options = std::move(options);
  c->cache = std::make_shared<CallImpl::Cache>();
  return c;
}

std::shared_ptr<CallImpl> make_vmap(std::shared_ptr<CallImpl> inner, std::vector<std::optional<int64_t>> in_axes) {
  if (!inner->choices.empty()) {  // an autotune: the batched candidates are tuned
    std::vector<std::shared_ptr<CallImpl>> batched;
    for (const auto& c : inner->choices) batched.push_back(make_vmap(c, in_axes));
    return make_choice(inner->choice_name, inner->choice_labels, std::move(batched));
  }
  auto c = std::make_shared<CallImpl>();
  c->inner = std::move(inner);
  c->in_axes = std::move(in_axes);
  c->cache = std::make_shared<CallImpl::Cache>();
  return c;
}

std::vector<Array> invoke_choice(const CallImpl& call, const std::vector<Array>& inputs);  // autotune.cc

std::vector<Array> invoke(const CallImpl& call, const std::vector<Array>& given) {
  if (!call.choices.empty()) return invoke_choice(call, given);
  auto e = entry_for(call, types_of(given));
  // A backend that runs on the host reads device inputs from host copies; its results are host arrays.
  std::vector<Array> inputs = given;
  if (e->runs_on_host)
    for (Array& a : inputs)
      if (a.defined() && a.device().kind != Device::cpu) a = to_host(a);
  std::vector<Array> outputs;
  outputs.resize(e->outputs.size());  // the backend allocates all but the aliased ones
  for (auto [in, out] : e->aliases) {
    PL_ASSERT(!outputs[static_cast<size_t>(out)].defined(), "output aliased twice");
    PL_ASSERT(inputs[static_cast<size_t>(in)].shape() == e->outputs[static_cast<size_t>(out)].shape,
              "aliased shapes differ");
    const Array& src = inputs[static_cast<size_t>(in)];
    // A device input is copied on its device (on the current stream), never through the host.
    outputs[static_cast<size_t>(out)] = src.device().kind == Device::cpu ? src.copy() : to_device(src, src.device());
  }
  e->exe->run(inputs, outputs);
  for (const Array& o : outputs) PL_ASSERT(o.defined(), "pallas_call '", call.name(), "': the backend left an output unallocated");
  outputs.resize(outputs.size() - e->num_scratch);
  return outputs;
}

std::string lower(const CallImpl& call, const std::vector<ShapeDtype>& inputs) {
  InputTypes in(inputs.begin(), inputs.end());
  return ir::print(trace_kernel(call, describe(call, in)));
}

std::string kernel_text(const CallImpl& call, const std::vector<Array>& inputs) {
  return ir::print(trace_kernel(call, describe(call, types_of(inputs))));
}

}  // namespace palladium::detail

namespace palladium {
std::string default_backend() { return backend::default_name(); }
std::vector<std::string> available_backends() { return backend::available_names(); }
}  // namespace palladium

namespace palladium::detail {

int trace_count(const CallImpl& call) {
  std::lock_guard<std::mutex> lock(call.cache->mu);
  return call.cache->traces;
}

}  // namespace palladium::detail
