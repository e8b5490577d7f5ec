// Finding and running the host C++ compiler (host_compiler.h).
#include "backends/cpu/host_compiler.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "backends/common/disk_cache.h"

extern char** environ;

namespace palladium::cpu {

namespace {

#ifdef PALLADIUM_HOST_CXX
constexpr const char* kBuildCompiler = PALLADIUM_HOST_CXX;
#else
constexpr const char* kBuildCompiler = "";
#endif

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> words;
  std::istringstream in(s);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// A bare name is searched on $PATH; a name with a slash is taken as it is.
std::optional<std::string> resolve(const std::string& name) {
  if (name.find('/') != std::string::npos) return is_executable_file(name) ? std::optional<std::string>(name) : std::nullopt;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
  }
  return std::nullopt;
}

CompilerLookup lookup(const std::string& cxx_env) {
  const std::string use_interpreter =
      "; install a C++20 compiler and point CXX at it, or run on the interpreter instead: "
      "CallOptions{.backend = \"interpret\"} or PALLADIUM_BACKEND=interpret";
  CompilerLookup out;
  if (!cxx_env.empty()) {
    std::vector<std::string> words = split_words(cxx_env);
    if (words.empty()) {
      out.why_not = "no host C++ compiler for the cpu backend: CXX is blank" + use_interpreter;
      return out;
    }
    std::optional<std::string> path = resolve(words[0]);
    if (!path) {
      out.why_not = "no host C++ compiler for the cpu backend: CXX='" + cxx_env + "' names no executable file" +
                    (words[0].find('/') == std::string::npos ? " on PATH" : "") + use_interpreter;
      return out;
    }
    words[0] = *path;
    out.compiler = HostCompiler{words, ""};
    return out;
  }
  const std::string built = kBuildCompiler;
  if (!built.empty()) {
    if (std::optional<std::string> path = resolve(built)) {
      out.compiler = HostCompiler{{*path}, ""};
      return out;
    }
  }
  out.why_not = "no host C++ compiler for the cpu backend: CXX is not set and the compiler Palladium was built with (" +
                (built.empty() ? std::string("unknown") : built) + ") does not exist here" + use_interpreter;
  return out;
}

// Runs argv with stdout and stderr into log_path; returns the exit status (-1 if it did not run).
int run_logged(const std::vector<std::string>& argv, const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::string scratch_root() {
  static const std::string root = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/palladium-" + std::to_string(::getuid());
    ::mkdir(dir.c_str(), 0700);
    return dir;
  }();
  return root;
}

namespace {
// The lookup for the current $CXX, cached per value (the environment may change between calls).
const CompilerLookup& cached_lookup() {
  static std::mutex mu;
  static std::map<std::string, CompilerLookup, std::less<>> cache;
  const char* env = std::getenv("CXX");
  const std::string_view key = env ? env : "";
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(std::string(key), lookup(std::string(key))).first;
  return it->second;  // entries are never erased: the reference stays valid
}
}  // namespace

CompilerLookup find_host_compiler() { return cached_lookup(); }
bool host_compiler_found() { return cached_lookup().compiler.has_value(); }

std::vector<std::string> compile_flags(const HostCompiler& compiler) {
  // -ffp-contract=off: elementwise arithmetic rounds like the interpreter (gemm.h opts back in);
  // -fwrapv: integer overflow wraps, as the IR defines it; no -ffast-math: NaN and inf are honoured;
  // -fno-tree-loop-distribute-patterns (GCC): tile rows are short, and an inline vector loop beats
  // a call to memcpy for them.
  std::vector<std::string> flags = {"-std=c++20", "-O3", "-march=native", "-fPIC", "-shared", "-fno-math-errno",
                                    "-fno-trapping-math", "-fwrapv", "-ffp-contract=off", "-fvisibility=hidden", "-w"};
  if (compiler_identity(compiler).find("clang") == std::string::npos)
    flags.push_back("-fno-tree-loop-distribute-patterns");
  // Streamed rows' input prefetch (device/cpu/tile_memory.h) is opt-in: -DPL_CPU_STREAM_PREFETCH=1
  // through PALLADIUM_CPU_CXXFLAGS.
  if (const char* extra = std::getenv("PALLADIUM_CPU_CXXFLAGS"))
    for (const std::string& w : split_words(extra)) flags.push_back(w);
  return flags;
}

std::string target_cpu() {
  static const std::string cpu = [] {
    std::ifstream f("/proc/cpuinfo");
    std::string line, vendor, family, model, model_name, features;
    while (std::getline(f, line)) {
      if (line.empty() && !model_name.empty()) break;  // the first processor is enough
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string field = line.substr(0, colon);
      field.erase(field.find_last_not_of(" \t") + 1);
      const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
      if (field == "vendor_id") vendor = value;
      else if (field == "cpu family") family = value;
      else if (field == "model") model = value;
      else if (field == "model name") model_name = value;
      else if (field == "flags" || field == "Features") features = value;
    }
    struct utsname u {};
    ::uname(&u);
    return std::string(u.machine) + " " + vendor + " family " + family + " model " + model + " (" + model_name +
           ") features " + backend::hash_hex(features);
  }();
  return cpu;
}

std::string compiler_identity(const HostCompiler& compiler) {
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  std::lock_guard<std::mutex> lock(mu);
  const std::string& path = compiler.command[0];
  if (auto it = cache.find(path); it != cache.end()) return it->second;
  std::string log_template = scratch_root() + "/version-XXXXXX";
  char* log = log_template.data();
  const int fd = ::mkstemp(log);
  std::string identity = path;
  if (fd >= 0) {
    ::close(fd);
    if (run_logged({path, "--version"}, log) == 0) {
      const std::string text = read_text(log);
      identity += ": " + text.substr(0, text.find('\n'));
    }
    ::unlink(log);
  }
  cache[path] = identity;
  return identity;
}

CompileResult compile_shared_object(const HostCompiler& compiler, const std::vector<std::string>& flags,
                                    const std::string& include_dir, const std::string& source_path,
                                    const std::string& output_path) {
  std::vector<std::string> argv = compiler.command;
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("-I" + include_dir);
  argv.push_back(source_path);
  argv.push_back("-o");
  argv.push_back(output_path);
  const std::string log_path = output_path + ".log";
  const int status = run_logged(argv, log_path);
  CompileResult r;
  r.log = read_text(log_path);
  ::unlink(log_path.c_str());
  if (status < 0 && r.log.empty()) r.log = "could not run " + argv[0];
  r.ok = status == 0;
  return r;
}

}  // namespace palladium::cpu
