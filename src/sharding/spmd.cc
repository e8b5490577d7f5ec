// Running a per-device program: compiled once, run by one thread per local device of the mesh (the
// caller's, and threads kept between runs), each with its SPMD context (position, communicator).
// The first failure aborts the communicator, so devices blocked in a collective fail too instead
// of waiting forever; the call reports that first failure, naming its device.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <latch>
#include <mutex>
#include <string>
#include <thread>

#include "program/executor.h"
#include "program/schedule.h"
#include "sharding/communicator.h"
#include "sharding/distributed.h"
#include "sharding/sharding.h"

namespace palladium::sharding {

namespace {

// Threads for the devices of SPMD runs, kept between calls (a thread per device per call cost its
// creation every call). A run's devices meet in collectives, so each task gets a thread at once:
// a waiting thread takes it, or a new one is started. Threads live as long as the process.
class DeviceThreads {
 public:
  void post(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    // Threads counted idle that were woken but have not taken their task yet still count, so two
    // posts in a row never share one thread.
    if (static_cast<size_t>(idle_) >= queue_.size()) cv_.notify_one();
    else std::thread([this] { loop(); }).detach();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [&] { return !queue_.empty(); });
      --idle_;
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      task();  // never throws: run_spmd's body catches everything
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  int idle_ = 0;
};

DeviceThreads& device_threads() {
  static DeviceThreads* t = new DeviceThreads;  // never destroyed: its threads wait on it until exit
  return *t;
}

}  // namespace

SpmdExecutable compile_spmd(const program::Program& partitioned, const Mesh& mesh) {
  // Every device runs the same order, so their collectives meet.
  const program::Program local = program::schedule_collectives_early(partitioned);
  SpmdExecutable exes;
  std::shared_ptr<program::Executable> host;  // virtual CPU devices share one compiled program
  for (const Device& d : mesh.devices()) {
    if (d.kind == Device::cpu) {
      if (!host) host = program::Executable::compile(local, Device{Device::cpu, 0});
      exes.push_back(host);
    } else {
      // Replayed as CUDA graphs between its collectives from the third run (executor_graph.cc).
      exes.push_back(program::Executable::compile(local, d, {.graphs = true}));
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
    } catch (...) {  // everything: this may run on a kept thread, which must not end
      errors[static_cast<size_t>(pos)] = std::current_exception();
      std::string why = "an exception that is not a std::exception";
      try {
        throw;
      } catch (const std::exception& e) {
        why = e.what();
      } catch (...) {
      }
      std::lock_guard<std::mutex> lock(mu);
      if (!failed) {
        failed = true;
        first[static_cast<size_t>(pos)] = true;
        comm.abort("device " + device_name(mesh->devices()[static_cast<size_t>(pos)]) + " failed: " + why);
      }
    }
  };
  // This process's devices: one thread each (the caller runs the first).
  std::vector<int64_t> mine;
  for (int64_t p = 0; p < n; ++p)
    if (is_local(mesh->devices()[static_cast<size_t>(p)])) mine.push_back(p);
  std::latch others_done(static_cast<std::ptrdiff_t>(mine.empty() ? 0 : mine.size() - 1));
  for (size_t i = 1; i < mine.size(); ++i)
    device_threads().post([&, pos = mine[i]] {
      body(pos);
      others_done.count_down();
    });
  if (!mine.empty()) body(mine[0]);
  others_done.wait();
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
