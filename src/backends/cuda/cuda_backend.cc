// The CUDA backend: IR -> CUDA C++ (codegen.h) -> NVRTC cubin (nvrtc_compiler.h, disk cache) ->
// cuModuleLoadData -> cuLaunchKernel with one thread block per program.
#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <sstream>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <unistd.h>

#include "backends/common/access_check.h"
#include "backends/common/chain_loops.h"
#include "backends/common/debug_print.h"
#include "backends/common/disk_cache.h"
#include "backends/cuda/codegen.h"
#include "backends/cuda/device_runtime.h"
#include "backends/cuda/launch_graph.h"
#include "backends/cuda/tensor_map.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/stream.h"
#include "backends/interp/interpreter.h"
#include "palladium/device.h"

namespace palladium::cuda {

// The block count of a persistent launch whose programs' work grows along the axis walked fastest
// (of `length` programs): block b runs programs b, b + B, b + 2B, ..., so with B coprime to the
// length its walk steps through every index of the axis in turn, and after length - 1 rounds or
// more every block has run (nearly) the same mix. Where the programs are too few for that, one
// block per program, which the hardware hands out as blocks finish. H100, stop 40 job 3, causal
// forward s2048 (16 q blocks) persistent at 131 blocks against the kernel without persistence:
// d128 blocks 128 x 64 0.344-0.351 -> 0.322 ms, 128 x 128 0.312-0.316 -> 0.302, d64 128 x 128
// 0.423 -> 0.410; at s8192 (64 q blocks, 31 rounds, so each block's stride visits about half of
// them) three of the four causal rows ran 15-33% slower at 131 blocks (d128 128 x 128 1.00 ->
// 1.33 ms) and d64 128 x 64 the same.
int64_t balanced_blocks(int64_t programs, int64_t resident, int64_t length) {
  int64_t b = std::max<int64_t>(resident, 1);
  while (b > 1 && std::gcd(b, length) != 1) --b;
  return programs < b * (length - 1) ? programs : b;
}

namespace {

// A loaded module and its kernel on one device; modules are shared by identical kernels.
struct LoadedKernel {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  int max_blocks_per_sm = 1;
  int max_clusters = 0;  // resident clusters of a clustered kernel (0: unknown)
};

constexpr size_t kCheckRecordBytes = 64;  // device/cuda/pl_checks.h: a flag, five fields and a lock

// An executable's kernel on one device: the loaded kernel and the launch parameters that its
// generation for the device's target chose.
struct DeviceKernel {
  std::shared_ptr<LoadedKernel> loaded;
  int threads = 128;
  int64_t shared_bytes = 0, scratch_bytes = 0, num_programs = 1;
  bool persistent = false;  // launch at most one wave of blocks; each loops over programs
  int64_t balance_length = 0;  // GeneratedKernel::balance_length
  int cluster = 1;          // blocks per cluster, along x
  std::vector<DebugPrintInfo> prints;
  std::vector<backend::AccessSite> access_sites;
  bool checked = false;
  std::vector<TensorMapSpec> tensor_maps;
};

struct ModuleCache {
  std::mutex mu;
  std::map<std::pair<int, std::string>, std::shared_ptr<LoadedKernel>> loaded;  // (device, source hash)
};
ModuleCache& module_cache() {
  static ModuleCache* c = new ModuleCache;  // modules stay loaded for the process
  return *c;
}

std::atomic<int> compile_only_sm{0};  // 0: off; else the target architecture
std::atomic<int> compiled_count{0};

// Launch timing (benchmarks): one pair of events, reused.
struct LaunchTiming {
  std::mutex mu;
  std::atomic<bool> on{false};
  CUevent start = nullptr, stop = nullptr;
  bool recorded = false;
};
LaunchTiming& launch_timing() {
  static LaunchTiming* t = new LaunchTiming;
  return *t;
}

int compile_only_target() {
  if (int sm = compile_only_sm.load()) return sm;
  const char* env = std::getenv("PALLADIUM_CUDA_COMPILE_ONLY");
  return env && *env && std::string(env) != "0" ? 90 : 0;
}

void write_debug_files(const std::string& kernel_name, const GeneratedKernel& g, const std::string& ptx,
                       const std::string& cubin) {
  std::string dir;
  if (const char* d = std::getenv("PALLADIUM_DEBUG_DIR"); d && *d) dir = d;
  else dir = (std::filesystem::temp_directory_path() / ("palladium-debug-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string base = dir + "/" + g.entry;
  std::ofstream(base + ".cu") << g.source;
  // NVRTC's PTX size counts the terminating NUL, which ptxas rejects in a file.
  std::ofstream(base + ".ptx") << ptx.substr(0, ptx.find_last_not_of('\0') + 1);
  std::ofstream(base + ".cubin", std::ios::binary) << cubin;
  std::cout << "--- pallas_call '" << kernel_name << "' (cuda): " << g.threads << " threads per program, "
            << g.shared_bytes << " bytes of shared memory, " << g.scratch_bytes << " bytes of scratch per program\n"
            << "    CUDA source: " << base << ".cu\n    PTX:         " << base << ".ptx\n    cubin:       " << base
            << ".cubin\n";
}

// Prints the kernel's debug_print records as the interpreter does: one line per record, programs
// in row-major order, each program's prints in execution order.
void print_debug_records(const ir::Kernel& k, const std::vector<DebugPrintInfo>& prints, const std::string& bytes,
                         bool truncated) {
  struct Record {
    int64_t program;
    uint32_t seq, op;
    size_t at;
  };
  std::vector<Record> records;
  for (size_t at = 0; at + kDebugRecordHeader <= bytes.size();) {
    uint32_t op, seq;
    int64_t program;
    std::memcpy(&op, bytes.data() + at, 4);
    std::memcpy(&seq, bytes.data() + at + 4, 4);
    std::memcpy(&program, bytes.data() + at + 8, 8);
    if (op >= prints.size()) break;
    records.push_back({program, seq, op, at});
    size_t size = kDebugRecordHeader;
    for (const ir::Type& t : prints[op].operands)
      size += static_cast<size_t>((numel(t.shape) * (is_float(t.dtype) && itemsize(t.dtype) == 2 ? 4 : itemsize(t.dtype)) + 7) / 8 * 8);
    at += size;
  }
  std::sort(records.begin(), records.end(), [](const Record& a, const Record& b) {
    return a.program != b.program ? a.program < b.program : a.seq < b.seq;
  });
  for (const Record& r : records) {
    const DebugPrintInfo& info = prints[r.op];
    size_t at = r.at + kDebugRecordHeader;
    std::vector<Array> values;
    for (const ir::Type& t : info.operands) {
      Array a(t.shape, t.dtype);
      const bool wide_float = is_float(t.dtype) && itemsize(t.dtype) == 2;  // held as float32
      const int reg = wide_float ? 4 : itemsize(t.dtype);
      for (int64_t e = 0; e < a.size(); ++e) {
        const char* p = bytes.data() + at + static_cast<size_t>(e * reg);
        if (wide_float) {
          float f;
          std::memcpy(&f, p, 4);
          a.set(e, f);
        } else {
          std::memcpy(static_cast<char*>(a.data()) + e * itemsize(t.dtype), p, static_cast<size_t>(itemsize(t.dtype)));
        }
      }
      values.push_back(a);
      at += static_cast<size_t>((a.size() * reg + 7) / 8 * 8);
    }
    std::cout << backend::format_debug_line(k.name, backend::program_coordinates(r.program, k.grid), info.text, values)
              << std::flush;
  }
  if (truncated) std::cout << "[" << k.name << "] debug_print output truncated (buffer full)\n" << std::flush;
}

// Where a call runs: on the device of its device-resident inputs (device inputs keep the outputs on
// the device), else on that of the innermost StreamScope if it names a CUDA stream, else on cuda:0
// (host inputs are copied in and the outputs copied back); always on that device's current stream.
struct Placement {
  int ordinal = 0;
  bool on_device = false;
  Stream stream;
};

Placement place_call(const std::string& kernel_name, const std::vector<Array>& inputs) {
  const std::string call = "pallas_call '" + kernel_name + "'";
  std::optional<Device> dev;
  for (const Array& a : inputs) {
    if (!a.defined() || a.device().kind != Device::cuda) continue;
    if (dev && *dev != a.device())
      throw Error(call + ": its inputs are on two devices, " + dev->str() + " and " + a.device().str() +
                  "; move them to one with to_device");
    dev = a.device();
  }
  const std::optional<Stream> scope = innermost_scope();
  const bool scoped_cuda = scope && scope->device().kind == Device::cuda;
  if (dev && scoped_cuda && scope->device() != *dev && !has_scope_for(*dev))
    throw Error(call + ": its arrays are on " + dev->str() + " but the current stream is " + scope->str() +
                " (the innermost StreamScope); open a StreamScope on a stream of " + dev->str() +
                " or move the arrays with to_device");
  const int ordinal = dev ? dev->index : scoped_cuda ? scope->device().index : 0;
  // A call with no inputs at all, under a StreamScope on a GPU, leaves its results on that GPU (a
  // program's constant-making kernels): host results would mean waiting for the stream to finish.
  bool any_input = false;
  for (const Array& a : inputs) any_input = any_input || a.defined();
  const bool on_device = dev.has_value() || (!any_input && scoped_cuda);
  return Placement{ordinal, on_device, current_stream_for(call, ordinal)};
}

class CudaExecutable final : public backend::Executable {
 public:
  CudaExecutable(const ir::Kernel& k, const backend::CompileOptions& o) : kernel_(k), options_(o) {}

  // Generates and compiles for the device's architecture; done once per device.
  std::shared_ptr<const DeviceKernel> kernel_for(int ordinal) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = per_device_.find(ordinal); it != per_device_.end()) return it->second;
    const DeviceInfo& dev = device(ordinal);
    Target target = target_for(dev.cc_major, dev.cc_minor);
    if (dev.max_shared_optin > 0) target.max_shared_bytes = dev.max_shared_optin;
    target.tma = driver()->cuTensorMapEncodeTiled != nullptr;
    GeneratedKernel g = generate_cuda(kernel_, options_.params, target);
    const std::string source_key = backend::hash_hex(target.arch_flag() + "\n" + g.source);
    std::shared_ptr<LoadedKernel> lk;
    {
      ModuleCache& mc = module_cache();
      std::lock_guard<std::mutex> lock2(mc.mu);
      if (auto it = mc.loaded.find({ordinal, source_key}); it != mc.loaded.end() && !options_.debug) lk = it->second;
    }
    if (!lk) {
      CompileResult c = compile_to_cubin(g, kernel_.name, target, true, options_.debug);
      ++compiled_count;
      if (options_.debug) write_debug_files(kernel_.name, g, c.ptx, c.cubin);
      const DriverApi& d = *driver();
      lk = std::make_shared<LoadedKernel>();
      make_current(ordinal);
      check_driver(d.cuModuleLoadData(&lk->module, c.cubin.data()), "pallas_call '" + kernel_.name + "': loading the cubin");
      check_driver(d.cuModuleGetFunction(&lk->function, lk->module, g.entry.c_str()),
                   "pallas_call '" + kernel_.name + "': finding " + g.entry);
      if (g.shared_bytes > 48 * 1024)
        check_driver(d.cuFuncSetAttribute(lk->function, kFuncAttrMaxDynamicSharedSizeBytes, static_cast<int>(g.shared_bytes)),
                     "pallas_call '" + kernel_.name + "': asking for " + std::to_string(g.shared_bytes) + " bytes of shared memory");
      d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&lk->max_blocks_per_sm, lk->function, g.threads,
                                                    static_cast<size_t>(g.shared_bytes));
      if (lk->max_blocks_per_sm < 1) lk->max_blocks_per_sm = 1;
      if (g.cluster > 1 && d.cuOccupancyMaxActiveClusters) {
        LaunchConfig config;
        config.grid_x = static_cast<unsigned>(g.cluster);
        config.block_x = static_cast<unsigned>(g.threads);
        config.shared_bytes = static_cast<unsigned>(g.shared_bytes);
        if (d.cuOccupancyMaxActiveClusters(&lk->max_clusters, lk->function, &config) != 0) lk->max_clusters = 0;
      }
      ModuleCache& mc = module_cache();
      std::lock_guard<std::mutex> lock2(mc.mu);
      mc.loaded[{ordinal, source_key}] = lk;
    }
    auto dk = std::make_shared<DeviceKernel>();
    dk->loaded = lk;
    dk->threads = g.threads;
    dk->shared_bytes = g.shared_bytes;
    dk->scratch_bytes = g.scratch_bytes;
    dk->num_programs = g.num_programs;
    dk->persistent = g.persistent;
    dk->balance_length = g.balance_length;
    dk->cluster = g.cluster;
    dk->prints = g.prints;
    dk->access_sites = g.access_sites;
    dk->checked = g.checked;
    dk->tensor_maps = g.tensor_maps;
    per_device_[ordinal] = dk;
    return dk;
  }

  void run(const std::vector<Array>& inputs, std::vector<Array>& outputs) override {
    const Placement at = place_call(kernel_.name, inputs);
    const int ordinal = at.ordinal;
    const bool on_device = at.on_device;
    const Device dev{Device::cuda, ordinal};
    const StreamRef stream = stream_ref(at.stream);
    const std::shared_ptr<const DeviceKernel> dk = kernel_for(ordinal);
    const LoadedKernel& lk = *dk->loaded;
    make_current(ordinal);
    const DriverApi& d = *driver();
    // Named in errors only: built when one is reported (a launch costs a few microseconds, and
    // this string was a tenth of the host's share of it).
    auto what = [&] {
      return "pallas_call '" + kernel_.name + "' on " + at.stream.str() + " (grid " + shape_str(kernel_.grid) + ", " +
             std::to_string(dk->threads) + " threads per program)";
    };

    // Temporaries are allocated for the launch stream and released as soon as the launch is queued:
    // the allocator gives them out again only in stream order, so nothing waits for them here.
    std::vector<CUdeviceptr> temporaries;
    struct Release {
      std::vector<CUdeviceptr>& t;
      ~Release() {
        for (CUdeviceptr p : t) release(p);
      }
    } release_all{temporaries};
    auto temp = [&](size_t bytes) {
      temporaries.push_back(allocate(ordinal, bytes, stream));
      return temporaries.back();
    };
    std::vector<Array> uploaded;  // host inputs of a device call, on the device for the launch
    if (recording()) {  // a jitted program being recorded for a CUDA graph: one launch, nothing else
      if (!on_device) mark_unusable("pallas_call '" + kernel_.name + "' copies host inputs");
      if (!kernel_.aliases.empty()) mark_unusable("pallas_call '" + kernel_.name + "' aliases an input");
      if (dk->scratch_bytes > 0 || !dk->prints.empty() || dk->checked || dk->num_programs == 0)
        mark_unusable("pallas_call '" + kernel_.name + "' needs work besides its launch");
    }

    std::vector<CUdeviceptr> ptrs;
    for (const ir::RefParam& p : kernel_.refs) {
      if (!p.is_output) {
        const Array& a = inputs.at(static_cast<size_t>(p.operand));
        PL_CHECK(a.defined(), what(), ": input ", p.operand, " is undefined (none) but the kernel reads it");
        if (a.device() == dev) {
          record_use(device_ptr(a), stream);
          ptrs.push_back(device_ptr(a));
        } else if (on_device) {
          mark_unusable("pallas_call '" + kernel_.name + "' moves an input between devices");
          uploaded.push_back(to_device(a, dev));
          ptrs.push_back(device_ptr(uploaded.back()));
        } else {  // host inputs stay alive until the stream is synchronized below
          const CUdeviceptr dp = temp(a.nbytes());
          copy_to_device(dp, a.data(), a.nbytes(), stream, what() + ": copying input " + std::to_string(p.operand));
          ptrs.push_back(dp);
        }
      } else {
        Array& o = outputs.at(static_cast<size_t>(p.operand));
        bool aliased = false;
        for (auto [in, out] : kernel_.aliases) aliased = aliased || out == p.operand;
        if (on_device) {
          // An aliased device input arrives already copied on its device; anything else is placed here.
          if (!o.defined()) o = device_array(p.array_shape, p.dtype, ordinal, stream);
          else if (o.device() != dev) o = to_device(o, dev);
          record_use(device_ptr(o), stream);
          ptrs.push_back(device_ptr(o));
        } else {
          if (!o.defined()) o = Array(p.array_shape, p.dtype);  // host inputs: host results
          const CUdeviceptr dp = temp(o.nbytes());
          if (aliased) copy_to_device(dp, o.data(), o.nbytes(), stream, what() + ": copying aliased output " + std::to_string(p.operand));
          ptrs.push_back(dp);
        }
      }
    }

    // The TMA's tensor maps, for this launch's pointers. An input at an address the TMA cannot
    // take (a view 2 bytes into its buffer, say) is read from an aligned copy.
    std::vector<TensorMapBytes> maps;
    for (const TensorMapSpec& spec : dk->tensor_maps) {
      CUdeviceptr& p = ptrs.at(static_cast<size_t>(spec.ref));
      if (!tensor_map_address_ok(p)) {
        mark_unusable("pallas_call '" + kernel_.name + "' copies a misaligned input for the TMA");
        const ir::RefParam& ref = kernel_.refs.at(static_cast<size_t>(spec.ref));
        const size_t bytes = static_cast<size_t>(numel(ref.array_shape)) * itemsize(ref.dtype);
        const CUdeviceptr aligned = temp(bytes);
        make_current(ordinal);
        check_driver(d.cuMemcpyDtoDAsync(aligned, p, bytes, stream.handle), what() + ": aligning an input for the TMA");
        p = aligned;
      }
      maps.push_back(encode_tensor_map(spec, p, what()));
    }

    const int64_t programs = dk->num_programs;
    uint64_t debug_header[2] = {0, 16u << 20};  // bytes used, capacity; alive until the stream is synchronized
    CUdeviceptr debug_buffer = 0, check_record = 0;
    if (programs > 0) {
      CUdeviceptr scratch = 0, flags = 0;
      unsigned long long stride = 0;
      int slots = 0;
      if (dk->scratch_bytes > 0) {
        const DeviceInfo& info = device(ordinal);
        const int64_t resident = static_cast<int64_t>(lk.max_blocks_per_sm) * info.multiprocessors;
        slots = static_cast<int>(std::min<int64_t>(programs, std::max<int64_t>(resident, 1)));
        stride = static_cast<unsigned long long>((dk->scratch_bytes + 255) / 256 * 256);
        scratch = temp(stride * static_cast<size_t>(slots));
        flags = temp(sizeof(unsigned) * static_cast<size_t>(slots));
        make_current(ordinal);
        check_driver(d.cuMemsetD8Async(flags, 0, sizeof(unsigned) * static_cast<size_t>(slots), stream.handle),
                     what() + ": clearing scratch slots");
      }
      std::vector<void*> args;
      for (CUdeviceptr& p : ptrs) args.push_back(&p);
      args.push_back(&scratch);
      args.push_back(&stride);
      args.push_back(&flags);
      args.push_back(&slots);
      if (!dk->prints.empty()) {
        debug_buffer = temp(16 + debug_header[1]);
        copy_to_device(debug_buffer, debug_header, sizeof(debug_header), stream, what() + ": clearing the debug_print buffer");
        args.push_back(&debug_buffer);
      }
      if (dk->checked) {
        check_record = temp(kCheckRecordBytes);
        make_current(ordinal);
        check_driver(d.cuMemsetD8Async(check_record, 0, kCheckRecordBytes, stream.handle), what() + ": clearing the check record");
        args.push_back(&check_record);
      }
      for (TensorMapBytes& m : maps) args.push_back(&m);
      const DeviceInfo& info = device(ordinal);
      const int64_t max_x = info.max_grid_x > 0 ? info.max_grid_x : 2147483647;
      int64_t blocks = programs;
      if (dk->persistent) {  // one wave (PALLADIUM_CUDA_PERSISTENT_BLOCKS caps it, for tests and tuning)
        int64_t resident = int64_t{lk.max_blocks_per_sm} * std::max(info.multiprocessors, 1);
        if (dk->cluster > 1 && lk.max_clusters > 0) resident = std::min<int64_t>(resident, int64_t{lk.max_clusters} * dk->cluster);
        blocks = std::min<int64_t>(programs, resident);
        if (const char* cap = std::getenv("PALLADIUM_CUDA_PERSISTENT_BLOCKS"); cap && std::atoll(cap) > 0)
          blocks = std::min<int64_t>(blocks, std::atoll(cap));
        if (dk->balance_length > 1 && dk->cluster == 1) blocks = balanced_blocks(programs, blocks, dk->balance_length);
        // Whole clusters: programs 2m and 2m + 1 run in one (the generator made the count even).
        blocks = std::max<int64_t>(dk->cluster, blocks / dk->cluster * dk->cluster);
      }
      const int64_t gx = std::min<int64_t>(blocks, max_x);
      const int64_t gy = (blocks + gx - 1) / gx;
      // A clustered kernel's blocks all run whole programs and meet at the kernel's end (choose_cluster
      // takes only even program counts below 2^30).
      PL_ASSERT(dk->cluster == 1 || (gy == 1 && gx % dk->cluster == 0 && programs % dk->cluster == 0), what(), ": ",
                programs, " programs do not launch as clusters of ", dk->cluster);
      PL_CHECK(gy <= (info.max_grid_y > 0 ? info.max_grid_y : 65535), what(), ": ", programs,
               " programs exceed the launch grid's limits");
      LaunchTiming& lt = launch_timing();
      std::unique_lock<std::mutex> timing_lock(lt.mu, std::defer_lock);
      if (lt.on) {
        timing_lock.lock();
        if (!lt.start) {
          d.cuEventCreate(&lt.start, 0);
          d.cuEventCreate(&lt.stop, 0);
        }
        d.cuEventRecord(lt.start, stream.handle);
      }
      const CUresult r = d.cuLaunchKernel(lk.function, static_cast<unsigned>(gx), static_cast<unsigned>(gy), 1,
                                          static_cast<unsigned>(dk->threads), 1, 1,
                                          static_cast<unsigned>(dk->shared_bytes), stream.handle, args.data(), nullptr);
      if (r != 0) throw Error(what() + ": the launch failed: " + driver_error_text(r));
      if (recording()) {
        RecordedLaunch rec{lk.function, static_cast<unsigned>(gx), static_cast<unsigned>(gy),
                           static_cast<unsigned>(dk->threads), static_cast<unsigned>(dk->shared_bytes), {}, ptrs.size()};
        rec.args.assign(ptrs.begin(), ptrs.end());
        rec.args.insert(rec.args.end(), {scratch, stride, flags, static_cast<uint64_t>(static_cast<uint32_t>(slots))});
        rec.tensor_maps = dk->tensor_maps;
        rec.map_values = maps;
        record_launch(std::move(rec), stream);
      }
      if (lt.on) {
        d.cuEventRecord(lt.stop, stream.handle);
        lt.recorded = true;
        timing_lock.unlock();
      }
    }
    if (check_record) {  // a checked run waits for its kernel and reports the first failed check
      uint64_t rec[kCheckRecordBytes / 8] = {};
      copy_to_host(rec, check_record, sizeof(rec), stream, what() + ": reading the check record");
      synchronize(stream, what() + ": reading the check record");
      if (rec[0] != 0) {
        backend::AccessFailure f{static_cast<int32_t>(rec[1]), static_cast<int32_t>(rec[2]), static_cast<int32_t>(rec[3]),
                                 static_cast<int64_t>(rec[4]),
                                 backend::program_coordinates(static_cast<int64_t>(rec[5]), kernel_.grid)};
        throw Error(backend::access_failure_message(kernel_, dk->access_sites, f, "cuda"));
      }
    }
    if (debug_buffer) {  // the records are printed now, so this call waits for its kernel
      synchronize(stream, what() + ": the kernel failed");
      uint64_t used = 0;
      copy_to_host(&used, debug_buffer, sizeof(used), stream, what() + ": reading debug_print output");
      synchronize(stream, what() + ": reading debug_print output");
      std::string bytes(std::min<uint64_t>(used, debug_header[1]), '\0');
      copy_to_host(bytes.data(), debug_buffer + 16, bytes.size(), stream, what() + ": reading debug_print output");
      synchronize(stream, what() + ": reading debug_print output");
      print_debug_records(kernel_, dk->prints, bytes, used > debug_header[1]);
    }
    if (!on_device) {
      const std::string copy_back = what() + ": running the kernel and copying its results to the host";
      for (const ir::RefParam& p : kernel_.refs) {
        if (!p.is_output) continue;
        Array& o = outputs.at(static_cast<size_t>(p.operand));
        const size_t ref_index = static_cast<size_t>(&p - kernel_.refs.data());
        copy_to_host(o.data(), ptrs[ref_index], o.nbytes(), stream, copy_back);
      }
      synchronize(stream, copy_back);
    }
  }

 private:
  ir::Kernel kernel_;
  backend::CompileOptions options_;
  std::mutex mu_;
  std::map<int, std::shared_ptr<const DeviceKernel>> per_device_;
};

class CudaBackend final : public backend::Backend {
 public:
  const char* name() const override { return "cuda"; }
  bool runs_on_host() const override { return false; }  // places host inputs on the device itself
  bool available() const override {
    return (compile_only_target() || driver() != nullptr) && nvrtc() != nullptr;
  }
  std::string unavailable_reason() const override {
    std::string why = compile_only_target() ? "" : cuda::unavailable_reason();
    if (why.empty()) why = nvrtc_unavailable_reason();
    return why;
  }
  std::unique_ptr<backend::Executable> compile(const ir::Kernel& k, const backend::CompileOptions& o) override {
    if (const int sm = compile_only_target()) {
      // Generate and compile for the target (errors propagate), then run on the interpreter.
      GeneratedKernel g = generate_cuda(backend::kernel_for_codegen(k, backend::checks_enabled(o.params.checks)), o.params,
                                        target_for(sm / 10, sm % 10));
      CompileResult c = compile_to_cubin(g, k.name, target_for(sm / 10, sm % 10), true, o.debug);
      ++compiled_count;
      if (o.debug) write_debug_files(k.name, g, c.ptx, c.cubin);
      return interp::backend().compile(k, o);
    }
    auto exe = std::make_unique<CudaExecutable>(backend::kernel_for_codegen(k, backend::checks_enabled(o.params.checks)), o);
    exe->kernel_for(0);  // compile now, so errors surface at the call that traced the kernel
    return exe;
  }
};

}  // namespace

backend::Backend& backend() {
  static CudaBackend b;
  return b;
}

void set_launch_timing(bool on) {
  LaunchTiming& t = launch_timing();
  std::lock_guard<std::mutex> lock(t.mu);
  t.on = on;
}

double last_launch_ms() {
  LaunchTiming& t = launch_timing();
  std::lock_guard<std::mutex> lock(t.mu);
  if (!t.recorded) return 0.0;
  const DriverApi& d = *driver();
  check_driver(d.cuEventSynchronize(t.stop), "waiting for the timed launch");
  float ms = 0;
  d.cuEventElapsedTime(&ms, t.start, t.stop);
  return ms;
}

void set_compile_only(bool on, int sm) { compile_only_sm = on ? sm : 0; }
bool compile_only() { return compile_only_target() != 0; }
int kernels_compiled() { return compiled_count.load(); }

void clear_module_cache() {
  ModuleCache& mc = module_cache();
  std::lock_guard<std::mutex> lock(mc.mu);
  mc.loaded.clear();  // modules stay loaded (executables may hold them); only lookups reset
}

}  // namespace palladium::cuda

namespace palladium {
void clear_compiled_kernels() { cuda::clear_module_cache(); }
}  // namespace palladium
