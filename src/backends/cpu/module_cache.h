// Compiled kernels as loaded shared objects, cached in memory (per process) and on disk
// (backends/common/disk_cache.h). Threads asking for the same key at once share one build.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "device/cpu/abi.h"

namespace palladium::cpu {

using RunFn = void (*)(const pl_cpu::Launch*, int64_t, int64_t);

// One dlopen'ed kernel; dlclose'd when the last executable using it is gone. It owns the file it
// was loaded from (an open memory-file descriptor, or a path to remove) for as long as it is
// loaded: glibc recognises loaded objects by device and inode, so a freed inode reused by the
// next kernel's file would make dlopen return this kernel again.
class Module {
 public:
  Module(void* handle, RunFn run, int backing_fd, std::string backing_path)
      : handle_(handle), run_(run), backing_fd_(backing_fd), backing_path_(std::move(backing_path)) {}
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  void run(const pl_cpu::Launch& launch, int64_t begin, int64_t end) const { run_(&launch, begin, end); }

 private:
  void* handle_;
  RunFn run_;
  int backing_fd_;            // -1: none
  std::string backing_path_;  // "": none (or kept on purpose)
};

struct BuildRequest {
  std::string kernel_name;
  std::string source;  // the generated C++
  bool debug = false;  // write the source where the user can read it, and say where
};

struct ModuleStats {
  std::atomic<int64_t> compiles{0}, disk_hits{0}, memory_hits{0};
};
ModuleStats& module_stats();

// The module for `request`: from memory, else from disk, else compiled (and stored on disk).
// Throws Error when there is no host compiler or the compiler rejects the source.
std::shared_ptr<Module> get_module(const BuildRequest& request);
void forget_modules_in_memory();
void set_source_transform(std::function<std::string(const std::string&)> fn);

}  // namespace palladium::cpu
