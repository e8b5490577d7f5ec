// Placeholder until the cpu backend lands: registered, and reports itself unavailable.
#include "backends/cpu/cpu_backend.h"

namespace palladium::cpu {
namespace {
class Placeholder final : public backend::Backend {
 public:
  const char* name() const override { return "cpu"; }
  std::string unavailable_reason() const override { return "the cpu backend is not built yet"; }
  std::unique_ptr<backend::Executable> compile(const ir::Kernel&, const backend::CompileOptions&) override {
    throw Error("the cpu backend is not built yet");
  }
};
}  // namespace
backend::Backend& backend() {
  static Placeholder b;
  return b;
}
}  // namespace palladium::cpu
