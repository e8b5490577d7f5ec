// Placeholder until the cuda backend lands: registered, and reports itself unavailable.
#include "backends/cuda/cuda_backend.h"

namespace palladium::cuda {
namespace {
class Placeholder final : public backend::Backend {
 public:
  const char* name() const override { return "cuda"; }
  std::string unavailable_reason() const override { return "the cuda backend is not built yet"; }
  std::unique_ptr<backend::Executable> compile(const ir::Kernel&, const backend::CompileOptions&) override {
    throw Error("the cuda backend is not built yet");
  }
};
}  // namespace
backend::Backend& backend() {
  static Placeholder b;
  return b;
}
}  // namespace palladium::cuda
