// The host C++ compiler that builds generated kernels into shared objects.
//
// Lookup order: $CXX (its first word is the compiler, later words are extra arguments, as make
// treats it), then the compiler Palladium itself was built with (PALLADIUM_HOST_CXX, set by
// CMake). PALLADIUM_CPU_CXXFLAGS appends flags. Flags, compiler identity and target CPU all go
// into the cache key, since -march=native makes the code specific to this CPU.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace palladium::cpu {

struct HostCompiler {
  std::vector<std::string> command;  // executable path, then any arguments from $CXX
  std::string identity;              // the first line of `--version`, read on first use
};

struct CompilerLookup {
  std::optional<HostCompiler> compiler;
  std::string why_not;  // when there is none: what was looked for, and how to use the interpreter
};
// find_host_compiler().compiler.has_value(), without copying the lookup.
bool host_compiler_found();

// A private scratch directory for this user: $TMPDIR/palladium-<uid> (created on first use).
std::string scratch_root();

// Cheap (cached per value of $CXX): safe to call on every pallas_call.
CompilerLookup find_host_compiler();

// The flags for this compiler (some GCC-only flags are left out for Clang).
std::vector<std::string> compile_flags(const HostCompiler& compiler);
// Vendor, family, model and feature flags of this CPU (Linux /proc/cpuinfo; else the architecture).
std::string target_cpu();
// Runs `--version` once per compiler path.
std::string compiler_identity(const HostCompiler& compiler);

struct CompileResult {
  bool ok = false;
  std::string log;  // the compiler's stdout and stderr
};
CompileResult compile_shared_object(const HostCompiler& compiler, const std::vector<std::string>& flags,
                                    const std::string& include_dir, const std::string& source_path,
                                    const std::string& output_path);

}  // namespace palladium::cpu
