// Building and loading kernels: key -> memory cache -> disk cache -> host compiler (module_cache.h).
#include "backends/cpu/module_cache.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>

#include "backends/common/disk_cache.h"
#include "backends/common/embedded.h"
#include "backends/common/source_context.h"
#include "backends/cpu/host_compiler.h"
#include "palladium/error.h"

namespace palladium::cpu {

namespace {

namespace fs = std::filesystem;

constexpr const char* kSourceName = "kernel.cc";

// PALLADIUM_CPU_KEEP_OBJECTS=1 leaves loaded shared objects (and their sources) on disk, so that
// profilers such as perf can name the code inside kernels.
bool keep_objects() {
  const char* v = std::getenv("PALLADIUM_CPU_KEEP_OBJECTS");
  return v && *v && std::string(v) != "0";
}

struct Modules {
  std::mutex mu;
  std::map<std::string, std::shared_future<std::shared_ptr<Module>>> by_key;
  std::function<std::string(const std::string&)> transform;
};
Modules& modules() {
  static Modules m;
  return m;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw Error("the cpu backend could not write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The device headers, written once per content under the scratch root (content-addressed, so
// concurrent processes agree and a changed library never reads stale headers).
const std::string& header_hash() {
  static const std::string hash = [] {
    std::string all;
    for (const auto& [name, text] : backend::embedded_headers())
      if (name.rfind("cpu/", 0) == 0) all += name + '\0' + text + '\0';
    return backend::hash_hex(all);
  }();
  return hash;
}

std::string include_dir() {
  const std::string dir = scratch_root() + "/include-" + header_hash();
  if (fs::is_directory(dir)) return dir;
  // Built aside and renamed into place whole, so a racing process never sees half of it.
  std::string staging = dir + ".tmp-XXXXXX";
  if (!::mkdtemp(staging.data())) throw Error("the cpu backend could not create a directory under " + scratch_root());
  std::error_code ec;
  fs::create_directories(staging + "/cpu", ec);
  for (const auto& [name, text] : backend::embedded_headers())
    if (name.rfind("cpu/", 0) == 0) write_file(staging + "/" + name, text);
  if (::rename(staging.c_str(), dir.c_str()) != 0) fs::remove_all(staging, ec);  // another process won
  return dir;
}

std::string make_temp_dir(const std::string& prefix) {
  std::string pattern = scratch_root() + "/" + prefix + "-XXXXXX";
  if (!::mkdtemp(pattern.data())) throw Error("the cpu backend could not create a directory under " + scratch_root());
  return pattern;
}

// dlopen + symbol lookup; nullptr (with `why`) if the file is not a kernel of this ABI. The
// module takes over `backing_fd` / `backing_path` (see Module) once it loads.
std::shared_ptr<Module> open_module(const std::string& path, int backing_fd, const std::string& backing_path,
                                    std::string& why) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = ::dlerror();
    why = e ? e : "dlopen failed";
    return nullptr;
  }
  auto abi = reinterpret_cast<int (*)()>(::dlsym(handle, "palladium_cpu_abi_version"));
  auto run = reinterpret_cast<RunFn>(::dlsym(handle, "palladium_cpu_run"));
  if (!abi || !run || abi() != pl_cpu::kAbiVersion) {
    why = "not a Palladium cpu kernel of ABI version " + std::to_string(pl_cpu::kAbiVersion);
    ::dlclose(handle);
    return nullptr;
  }
  return std::make_shared<Module>(handle, run, backing_fd, backing_path);
}

// Loads a shared object held in memory: from an anonymous memory file where Linux has them (no
// file system round trip), else from a private temporary file (kept while loaded; profilers can
// read it when PALLADIUM_CPU_KEEP_OBJECTS is set).
std::shared_ptr<Module> open_payload(const std::string& payload, std::string& why) {
  if (!keep_objects()) {
    const int fd = ::memfd_create("palladium-cpu-kernel", MFD_CLOEXEC);
    if (fd >= 0) {
      const bool written = ::write(fd, payload.data(), payload.size()) == static_cast<ssize_t>(payload.size());
      if (written)
        if (std::shared_ptr<Module> m = open_module("/proc/self/fd/" + std::to_string(fd), fd, "", why)) return m;
      ::close(fd);
    }
  }
  std::string path = scratch_root() + "/load-XXXXXX.so";
  const int fd = ::mkstemps(path.data(), 3);
  if (fd < 0) return nullptr;
  ::close(fd);
  write_file(path, payload);
  std::shared_ptr<Module> m = open_module(path, -1, keep_objects() ? "" : path, why);
  if (!m) ::unlink(path.c_str());
  return m;
}

// PALLADIUM_CPU_VERBOSE=1: one line per kernel that was built or loaded, with the time it took.
void report(const BuildRequest& request, const char* how, std::chrono::steady_clock::time_point start) {
  const char* v = std::getenv("PALLADIUM_CPU_VERBOSE");
  if (!v || !*v || std::string(v) == "0") return;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "[palladium cpu] kernel '%s' %s in %.1f ms\n", request.kernel_name.c_str(), how, ms);
}

std::string cache_key(const HostCompiler& compiler, const std::vector<std::string>& flags, const std::string& source) {
  std::string key = "palladium " PALLADIUM_VERSION " cpu abi " + std::to_string(pl_cpu::kAbiVersion) + "\n";
  key += "compiler: " + compiler_identity(compiler);
  for (size_t i = 1; i < compiler.command.size(); ++i) key += " " + compiler.command[i];
  key += "\nflags:";
  for (const std::string& f : flags) key += " " + f;
  key += "\ncpu: " + target_cpu() + "\nheaders: " + header_hash() + "\n" + source;
  return key;
}

std::string compile_error(const BuildRequest& request, const HostCompiler& compiler, const std::string& source,
                          const std::string& source_path, const std::string& log) {
  // The first error in the generated file itself, else the first location in the log.
  int line = 0;
  std::istringstream lines(log);
  for (std::string l; std::getline(lines, l) && line == 0;)
    if (l.find(std::string(kSourceName) + ":") != std::string::npos && l.find("error") != std::string::npos)
      line = backend::first_error_line(l.substr(l.find(kSourceName)));
  if (line == 0) line = backend::first_error_line(log);
  std::string shown;
  std::istringstream again(log);
  int count = 0;
  for (std::string l; std::getline(again, l) && count < 20; ++count) shown += "  " + l + "\n";
  std::string msg = "pallas_call '" + request.kernel_name + "': the host compiler (" + compiler.command[0] +
                    ") rejected the cpu backend's generated C++ (" + source_path + "):\n" + shown;
  if (line > 0) msg += "generated source around line " + std::to_string(line) + ":\n" + backend::source_excerpt(source, line);
  return msg;
}

std::shared_ptr<Module> build(const BuildRequest& request, const HostCompiler& compiler,
                              const std::vector<std::string>& flags, const std::string& source) {
  const std::string key = cache_key(compiler, flags, source);
  const backend::DiskCache disk("cpu");
  std::string why;

  const auto start = std::chrono::steady_clock::now();
  if (std::optional<std::string> payload = disk.load(key)) {
    if (std::shared_ptr<Module> m = open_payload(*payload, why)) {
      ++module_stats().disk_hits;
      report(request, "loaded from the disk cache", start);
      return m;
    }
  }

  const std::string dir = make_temp_dir("build");
  const std::string source_path = dir + "/" + kSourceName, so_path = dir + "/kernel.so";
  write_file(source_path, source);
  ++module_stats().compiles;
  const CompileResult result = compile_shared_object(compiler, flags, include_dir(), source_path, so_path);
  if (!result.ok) throw Error(compile_error(request, compiler, source, source_path, result.log));  // keeps the files
  const std::string binary = read_file(so_path);
  disk.store(key, binary);
  std::shared_ptr<Module> m = open_payload(binary, why);
  std::error_code ec;
  if (!keep_objects()) fs::remove_all(dir, ec);
  if (!m) throw InternalError("pallas_call '" + request.kernel_name + "': the compiled kernel does not load: " + why);
  report(request, "compiled", start);
  return m;
}

void write_debug_source(const BuildRequest& request, const std::string& source) {
  std::string safe;
  for (char c : request.kernel_name) safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') ? c : '_';
  const std::string dir = scratch_root() + "/debug";
  ::mkdir(dir.c_str(), 0700);
  const std::string path = dir + "/" + safe + "-" + backend::hash_hex(source).substr(0, 12) + ".cc";
  write_file(path, source);
  std::cout << "--- pallas_call '" << request.kernel_name << "': generated C++ (cpu backend) written to " << path
            << " (device headers: " << include_dir() << "/cpu) ---\n"
            << std::flush;
}

}  // namespace

Module::~Module() {
  ::dlclose(handle_);
  if (backing_fd_ >= 0) ::close(backing_fd_);
  if (!backing_path_.empty()) ::unlink(backing_path_.c_str());
}

ModuleStats& module_stats() {
  static ModuleStats s;
  return s;
}

std::shared_ptr<Module> get_module(const BuildRequest& request) {
  Modules& ms = modules();
  std::string source = request.source;
  {
    std::lock_guard<std::mutex> lock(ms.mu);
    if (ms.transform) source = ms.transform(source);
  }
  if (request.debug) write_debug_source(request, source);
  CompilerLookup found = find_host_compiler();
  if (!found.compiler) throw Error("pallas_call '" + request.kernel_name + "': " + found.why_not);
  const std::vector<std::string> flags = compile_flags(*found.compiler);
  // In memory the key is what this process would compile: command, flags and source.
  std::string key;
  for (const std::string& w : found.compiler->command) key += w + '\0';
  for (const std::string& f : flags) key += f + '\0';
  key += source;
  std::promise<std::shared_ptr<Module>> promise;
  {
    std::lock_guard<std::mutex> lock(ms.mu);
    if (auto it = ms.by_key.find(key); it != ms.by_key.end()) {
      std::shared_future<std::shared_ptr<Module>> f = it->second;
      ++module_stats().memory_hits;
      return f.get();  // waits if another thread is still building it
    }
    ms.by_key[key] = promise.get_future().share();
  }
  try {
    std::shared_ptr<Module> m = build(request, *found.compiler, flags, source);
    promise.set_value(m);
    return m;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(ms.mu);
    ms.by_key.erase(key);  // a later call tries again (and reports the error again)
    throw;
  }
}

void forget_modules_in_memory() {
  std::lock_guard<std::mutex> lock(modules().mu);
  modules().by_key.clear();
}

void set_source_transform(std::function<std::string(const std::string&)> fn) {
  std::lock_guard<std::mutex> lock(modules().mu);
  modules().transform = std::move(fn);
}

}  // namespace palladium::cpu
