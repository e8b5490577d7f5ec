// Running a per-device program: compiled once, run by one thread per local device of the mesh, each
// with its SPMD context (position, communicator). The first failure aborts the communicator, so
// devices blocked in a collective fail too instead of waiting forever; the call reports that
// first failure, naming its device.
#include <exception>
#include <thread>

#include "program/executor.h"
#include "sharding/communicator.h"
#include "sharding/distributed.h"
#include "sharding/sharding.h"

namespace palladium::sharding {

SpmdExecutable compile_spmd(const program::Program& local, const Mesh& mesh) {
  SpmdExecutable exes;
  std::shared_ptr<program::Executable> host;  // virtual CPU devices share one compiled program
  for (const Device& d : mesh.devices()) {
    if (d.kind == Device::cpu) {
      if (!host) host = program::Executable::compile(local, Device{Device::cpu, 0});
      exes.push_back(host);
    } else {
      exes.push_back(program::Executable::compile(local, d));
    }
  }
  return exes;
}

std::vector<std::vector<Array>> run_spmd(const SpmdExecutable& exe, const std::shared_ptr<const Mesh>& mesh,
                                         const std::vector<std::vector<Array>>& inputs, const std::string& what) {
  const int64_t n = mesh->size();
  std::unique_ptr<Communicator> comm_owner = make_communicator(*mesh);
  Communicator& comm = *comm_owner;
  std::vector<std::vector<Array>> outs(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<bool> first(static_cast<size_t>(n), false);
  std::mutex mu;
  bool failed = false;
  auto body = [&](int64_t pos) {
    SpmdContext ctx{pos, &comm};
    ScopedSpmdContext scope(&ctx);
    try {
      outs[static_cast<size_t>(pos)] = exe[static_cast<size_t>(pos)]->run(inputs[static_cast<size_t>(pos)]);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(pos)] = std::current_exception();
      std::lock_guard<std::mutex> lock(mu);
      if (!failed) {
        failed = true;
        first[static_cast<size_t>(pos)] = true;
        comm.abort("device " + device_name(mesh->devices()[static_cast<size_t>(pos)]) + " failed: " + e.what());
      }
    }
  };
  // This process's devices: one thread each (the caller runs the first).
  std::vector<int64_t> mine;
  for (int64_t p = 0; p < n; ++p)
    if (is_local(mesh->devices()[static_cast<size_t>(p)])) mine.push_back(p);
  std::vector<std::thread> threads;
  for (size_t i = 1; i < mine.size(); ++i) threads.emplace_back(body, mine[i]);
  if (!mine.empty()) body(mine[0]);
  for (std::thread& t : threads) t.join();
  for (int64_t p = 0; p < n; ++p)
    if (first[static_cast<size_t>(p)]) {
      try {
        std::rethrow_exception(errors[static_cast<size_t>(p)]);
      } catch (const Error& e) {
        throw Error(what + " on device " + device_name(mesh->devices()[static_cast<size_t>(p)]) + ": " + e.what());
      }
    }
  return outs;
}

}  // namespace palladium::sharding
