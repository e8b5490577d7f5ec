// Communicators: how the devices of one SPMD run exchange data. The collectives of a per-device
// program (collectives.cc) are written over `exchange`; an engine may implement them natively.
// Engines: in-process between virtual CPU devices (here), MPI between processes (distributed.cc),
// NCCL between GPUs (nccl_communicator.cc, over either of the others for its set-up).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "palladium/array.h"
#include "palladium/sharding.h"

namespace palladium::program {
struct Eqn;
}

namespace palladium::sharding {

class Communicator {
 public:
  virtual ~Communicator() = default;
  // Every member of `group` (mesh positions, in group order) calls this with its own piece; each
  // gets every member's piece, in group order. `what` names the collective in errors.
  virtual std::vector<Array> exchange(int64_t position, const std::vector<int64_t>& group, const Array& mine,
                                      const std::string& what) = 0;
  // Makes every pending and later exchange fail with `why` (a device failed: the others must not hang).
  virtual void abort(const std::string& why) = 0;
  // The engine, for messages and tests: "in-process", "mpi", "nccl (over in-process)".
  virtual std::string name() const = 0;
  // The engine's own implementation of collective `e` for the device at `position` (`me` in
  // `group`), or nullopt where it has none: the collective is then done over exchange. Where
  // `join` is given, an engine that runs the collective beside the device's stream may leave the
  // stream unordered after it and set *join to the call that orders it: the caller makes that call
  // before anything reads the results (the collective then overlaps the work in between).
  virtual std::optional<std::vector<Array>> native(const program::Eqn& e, int64_t position,
                                                   const std::vector<int64_t>& group, int64_t me,
                                                   const std::vector<Array>& ins, std::function<void()>* join) {
    (void)e, (void)position, (void)group, (void)me, (void)ins, (void)join;
    return std::nullopt;
  }
};

// The NCCL engine over `host` (which it uses to meet and to share NCCL's ids), where every device
// of `mesh` is a CUDA GPU and NCCL loads, unless PALLADIUM_NCCL=0; else `host` itself (collectives
// between GPUs then travel through host memory).
std::unique_ptr<Communicator> with_nccl(const Mesh& mesh, std::unique_ptr<Communicator> host);

// How long a device waits in a collective: PALLADIUM_COLLECTIVE_TIMEOUT_S (default 300 s).
std::chrono::milliseconds collective_timeout();

// Between threads of one process. A device waiting longer than the timeout
// (PALLADIUM_COLLECTIVE_TIMEOUT_S, default 300 s) fails naming the devices it waited for.
class InProcessCommunicator final : public Communicator {
 public:
  explicit InProcessCommunicator(int64_t devices);
  std::vector<Array> exchange(int64_t position, const std::vector<int64_t>& group, const Array& mine,
                              const std::string& what) override;
  void abort(const std::string& why) override;
  std::string name() const override { return "in-process"; }

 private:
  struct Rendezvous {
    std::vector<Array> pieces;
    std::vector<bool> arrived;
    int64_t count = 0, left = 0;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> sequence_;  // per device: exchanges it has made
  std::map<std::pair<int64_t, int64_t>, std::shared_ptr<Rendezvous>> open_;  // (sequence, leader)
  std::string aborted_;
  std::chrono::milliseconds timeout_;
};

// The device this thread runs for in an SPMD run, and its communicator.
struct SpmdContext {
  int64_t position = 0;  // in the mesh of the collective being run (its params name it)
  Communicator* comm = nullptr;
};
// The context of this thread (nullptr outside an SPMD run); set for a scope.
const SpmdContext* spmd_context();
class ScopedSpmdContext {
 public:
  explicit ScopedSpmdContext(const SpmdContext* c);
  ~ScopedSpmdContext();
  ScopedSpmdContext(const ScopedSpmdContext&) = delete;
  ScopedSpmdContext& operator=(const ScopedSpmdContext&) = delete;

 private:
  const SpmdContext* saved_;
};

}  // namespace palladium::sharding
