// The executor: a Program compiled into a list of steps (generated kernels, views, user kernels,
// nested programs for calls and loops) and run over Arrays on one device.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "program/lower.h"
#include "program/program.h"

namespace palladium::program {

struct CompileOptions {
  std::string backend;  // "" = array_backend(device)
  bool fuse = true;     // fuse elementwise chains (and the reductions among them) into one kernel
  bool graphs = false;  // on CUDA, record the launches of one run and replay them as a graph (jit)
};

class Executable {
 public:
  static std::shared_ptr<Executable> compile(const Program& p, Device device, CompileOptions options = {});
  std::vector<Array> run(const std::vector<Array>& inputs) const;
  // The steps, one per line: what runs, e.g. "kernel fused_mul_add_max (%3, %4) -> %7".
  std::string describe() const;
  size_t num_kernels() const;
  // How the program runs on CUDA: "replayed as a CUDA graph of N kernels", "recorded on the next
  // run", "launched kernel by kernel: <why>" (executor_graph.cc); "" where graphs do not apply.
  std::string graph_status() const;

  struct Step;
  struct GraphCache;
  // Called before (true) and after (false) each collective step of a run.
  using StepHook = std::function<void(const Step&, bool before)>;

 private:
  // `keep`: every variable's value is left there (nothing freed, collectives joined at once).
  std::vector<Array> run_steps(const std::vector<Array>& inputs, std::vector<Array>* keep,
                               const StepHook* around_collective = nullptr) const;
  // The run as a CUDA graph, or nothing when this run goes step by step (executor_graph.cc).
  std::optional<std::vector<Array>> run_graphed(const std::vector<Array>& inputs) const;
  static std::shared_ptr<GraphCache> make_graph_cache(const Executable& x);

  Program program_;
  Device device_;
  std::string backend_;
  std::vector<std::shared_ptr<Step>> steps_;
  std::vector<std::vector<int>> frees_;  // vars dead after each step
  std::shared_ptr<GraphCache> graph_;    // jitted programs on CUDA
};

// `a` on device d (itself when it is there already); a sharded Array is gathered first.
Array placed(const Array& a, Device d);

// Runs one equation eagerly on concrete Arrays (compiled once per signature, then cached).
std::vector<Array> run_eager(Prim prim, const Params& params, const std::vector<Array>& ins,
                             const std::vector<Type>& outs, Device device);

// Blocks and matmul tiles are those of `backend` (block_budget, matmul_tile).
std::vector<FusionGroup> fuse(const Program& p, bool enabled, const std::string& backend);

}  // namespace palladium::program
