// The native cpu backend: generate C++ (codegen.h), build it with the host compiler and cache it
// (module_cache.h), run the programs of the grid on the worker threads (thread_pool.h).
//
// Runtime checks are the interpreter's job: compiled kernels do not check block-relative bounds
// (except in checked runs, CompilerParams::checks: see backends/common/access_check.h), reads of
// unwritten outputs, poison, integer division by zero (it yields 0) or programs racing
// on one output element. Every access is clipped to its array, so a faulty kernel computes wrong
// values but never touches memory outside its arrays. Kernels that debug_print run their programs
// one after another in grid order, so their output reads like the interpreter's.
#include "backends/cpu/cpu_backend.h"

#include <cstring>
#include <iostream>
#include <mutex>
#include <optional>

#include "backends/common/access_check.h"
#include "backends/common/chain_loops.h"
#include "backends/common/debug_print.h"
#include "backends/cpu/codegen.h"
#include "backends/cpu/host_compiler.h"
#include "backends/cpu/module_cache.h"
#include "backends/cpu/gemm/gemm_dispatch.h"
#include "backends/cpu/thread_pool.h"
#include "palladium/error.h"

namespace palladium::cpu {

namespace {

// Room for the generated function's own spills and the runtime's frames beside the tiles.
constexpr int64_t kFrameMargin = 1 << 20;

// What the generated code's callbacks reach through Launch::host.
struct RunContext {
  const ir::Kernel* kernel;
  const GeneratedKernel* generated;
  std::mutex mu;
  std::optional<backend::AccessFailure> failure;  // checked runs: the failing program first in grid order
};

// A tile in the generated code's compute type as an Array of its dtype.
Array compute_to_array(const ir::Type& t, const void* data) {
  Array a(t.shape, t.dtype);
  const int64_t n = numel(t.shape);
  const float* f = static_cast<const float*>(data);
  if (t.dtype == DType::float16 || t.dtype == DType::bfloat16) {
    uint16_t* out = static_cast<uint16_t*>(a.data());
    for (int64_t k = 0; k < n; ++k) out[k] = t.dtype == DType::float16 ? float_to_half_bits(f[k]) : float_to_bfloat16_bits(f[k]);
  } else {
    std::memcpy(a.data(), data, static_cast<size_t>(n) * static_cast<size_t>(itemsize(t.dtype)));  // bool is one byte 0/1 too
  }
  return a;
}

// Formats one debug_print line as the interpreter does.
void print_callback(void* host, int32_t id, const int64_t* program, const void* const* values) {
  const RunContext& ctx = *static_cast<const RunContext*>(host);
  const PrintSite& site = ctx.generated->prints[static_cast<size_t>(id)];
  std::vector<Array> arrays;
  for (size_t v = 0; v < site.types.size(); ++v) arrays.push_back(compute_to_array(site.types[v], values[v]));
  const std::string line = backend::format_debug_line(
      ctx.kernel->name, std::vector<int64_t>(program, program + ctx.kernel->grid.size()), site.format, arrays);
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::cout << line << std::flush;
}

void fail_callback(void* host, int32_t site, int32_t kind, int32_t dim, int64_t value, const int64_t* program) {
  RunContext& ctx = *static_cast<RunContext*>(host);
  backend::AccessFailure f{site, kind, dim, value, std::vector<int64_t>(program, program + ctx.kernel->grid.size())};
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (!ctx.failure || f.program < ctx.failure->program) ctx.failure = std::move(f);
}

class CpuExecutable final : public backend::Executable {
 public:
  CpuExecutable(const ir::Kernel& kernel, GeneratedKernel generated, std::shared_ptr<Module> module)
      : kernel_(kernel), generated_(std::move(generated)), module_(std::move(module)) {}

  void run(const std::vector<Array>& inputs, std::vector<Array>& outputs) override {
    backend::allocate_host_outputs(kernel_, outputs);
    std::vector<void*> refs(kernel_.refs.size());
    for (size_t i = 0; i < kernel_.refs.size(); ++i) {
      const ir::RefParam& p = kernel_.refs[i];
      const Array& a = p.is_output ? outputs.at(static_cast<size_t>(p.operand)) : inputs.at(static_cast<size_t>(p.operand));
      PL_ASSERT(a.defined() && a.shape() == p.array_shape && a.dtype() == p.dtype, "operand type differs from the traced type");
      refs[i] = const_cast<void*>(a.data());
    }
    ThreadPool& pool = ThreadPool::instance();
    RunContext context{&kernel_, &generated_, {}, std::nullopt};
    const pl_cpu::Launch launch{refs.data(), &context, &print_callback, &fail_callback, gemm_for_this_cpu().run,
                                static_cast<int32_t>(pool.size())};
    const int64_t total = generated_.work_items;  // see GeneratedKernel::work_items
    // Several chunks per worker balance uneven programs; debug_print keeps grid order.
    const int64_t chunk = generated_.prints.empty() ? std::max<int64_t>(1, total / (4 * pool.size())) : total;
    const Module& module = *module_;
    const int64_t frame = generated_.frame_bytes + kFrameMargin;
    auto programs = [&](int64_t begin, int64_t end) { module.run(launch, begin, end); };
    // Tiles larger than a worker's stack: threads with stacks of the frame's size, for this call.
    if (static_cast<uint64_t>(frame) > pool.stack_bytes())
      pool.run_on_large_stacks(total, chunk, frame, programs, "pallas_call '" + kernel_.name + "'");
    else
      pool.run(total, chunk, frame, programs);
    if (context.failure)
      throw Error(backend::access_failure_message(kernel_, generated_.access_sites, *context.failure, "cpu"));
  }

 private:
  ir::Kernel kernel_;
  GeneratedKernel generated_;
  std::shared_ptr<Module> module_;
};

class CpuBackend final : public backend::Backend {
 public:
  const char* name() const override { return "cpu"; }
  bool runs_on_host() const override { return true; }
  std::string unavailable_reason() const override { return find_host_compiler().why_not; }
  bool available() const override { return host_compiler_found(); }
  std::unique_ptr<backend::Executable> compile(const ir::Kernel& kernel, const backend::CompileOptions& options) override {
    const bool checks = backend::checks_enabled(options.params.checks);
    const ir::Kernel k = backend::kernel_for_codegen(kernel, checks);
    GeneratedKernel generated = generate(k, checks);
    std::shared_ptr<Module> module = get_module({k.name, generated.source, options.debug});
    return std::make_unique<CpuExecutable>(k, std::move(generated), std::move(module));
  }
};

}  // namespace

backend::Backend& backend() {
  static CpuBackend b;
  return b;
}

CacheStats cache_stats() {
  const ModuleStats& s = module_stats();
  return {s.compiles.load(), s.disk_hits.load(), s.memory_hits.load()};
}

void clear_memory_cache() { forget_modules_in_memory(); }

void set_source_transform_for_testing(std::function<std::string(const std::string&)> fn) { set_source_transform(std::move(fn)); }

int num_threads() { return ThreadPool::instance().size(); }

}  // namespace palladium::cpu
