// Several processes through MPI (Debian's OpenMPI): pl::distributed::initialize() joins the
// processes mpirun started; each brings PALLADIUM_CPU_DEVICES devices, numbered process by
// process (or an equal share of the one host's GPUs), and runs the threads of its own devices.
// Between processes the collectives exchange pieces with non-blocking point-to-point messages on a
// communicator of Palladium's own: tags name the sending and receiving device, and MPI's ordering
// per (sender, tag) keeps successive collectives apart. Waits poll with a deadline, so a process
// that died or runs another program gives an error on every rank rather than a hang.
#include "sharding/distributed.h"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "palladium/device.h"
#include "sharding/sharding.h"

#ifdef PALLADIUM_HAVE_MPI
#include <mpi.h>
#endif

namespace palladium {

namespace sharding {
namespace {

struct Processes {
  bool initialized = false;
  int rank = 0, size = 1;
  int64_t per_process = 1;
#ifdef PALLADIUM_HAVE_MPI
  MPI_Comm comm = MPI_COMM_NULL;
#endif
};
Processes& processes() {
  static Processes p;
  return p;
}

#ifdef PALLADIUM_HAVE_MPI
std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const Mesh& mesh) : mesh_(mesh), timeout_(collective_timeout()) {}

  std::vector<Array> exchange(int64_t position, const std::vector<int64_t>& group, const Array& mine,
                              const std::string& what) override {
    check_aborted(what, position);
    const Array piece = to_host(mine);
    PL_CHECK(piece.nbytes() <= static_cast<size_t>(1) << 30, what, ": pieces above 1 GiB are not sent yet");
    const int bytes = static_cast<int>(piece.nbytes());
    const Device me = mesh_.devices()[static_cast<size_t>(position)];
    std::vector<Array> all(group.size());
    std::vector<MPI_Request> reqs;
    std::vector<size_t> recv_of;  // request index -> group member (receives only)
    for (size_t i = 0; i < group.size(); ++i) {
      const Device other = mesh_.devices()[static_cast<size_t>(group[i])];
      if (group[i] == position) {
        all[i] = piece;
        continue;
      }
      all[i] = Array(piece.shape(), piece.dtype());
      MPI_Request r;
      check(MPI_Irecv(all[i].data(), bytes, MPI_BYTE, owner_process(other), tag(other, me), comm(), &r), what);
      reqs.push_back(r);
      recv_of.push_back(i);
    }
    for (size_t i = 0; i < group.size(); ++i) {
      if (group[i] == position) continue;
      const Device other = mesh_.devices()[static_cast<size_t>(group[i])];
      MPI_Request r;
      check(MPI_Isend(piece.data(), bytes, MPI_BYTE, owner_process(other), tag(me, other), comm(), &r), what);
      reqs.push_back(r);
    }
    std::vector<MPI_Status> status(reqs.size());
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (true) {
      int done = 0;
      const int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, status.data());
      if (rc != MPI_SUCCESS) {
        abandon(reqs, all, piece);
        throw Error(what + " on device " + device_name(me) + ": MPI failed (" + mpi_error(rc) +
                    "); the processes are probably running different programs");
      }
      if (done) break;
      if (!aborted_.empty() || std::chrono::steady_clock::now() > deadline) {
        abandon(reqs, all, piece);
        check_aborted(what, position);
        throw Error(what + " timed out: device " + device_name(me) + " waited " + std::to_string(timeout_.count() / 1000.0) +
                    " s for other processes (one failed, or runs another program; PALLADIUM_COLLECTIVE_TIMEOUT_S sets "
                    "the limit)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    for (size_t k = 0; k < recv_of.size(); ++k) {
      int count = 0;
      MPI_Get_count(&status[k], MPI_BYTE, &count);
      if (count != bytes)
        throw Error(what + " on device " + device_name(me) + ": received " + std::to_string(count) + " bytes from " +
                    device_name(mesh_.devices()[static_cast<size_t>(group[recv_of[k]])]) + ", expected " +
                    std::to_string(bytes) + ": the processes are running different programs");
    }
    return all;
  }

  std::string name() const override { return "mpi"; }
  void abort(const std::string& why) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.empty()) aborted_ = why;
  }

 private:
  static MPI_Comm comm() { return processes().comm; }
  // Devices are numbered globally; a tag names the sender's and receiver's local slots.
  static int tag(Device from, Device to) {
    const int64_t per = processes().per_process;
    return static_cast<int>((from.index % per) * 4096 + (to.index % per));
  }
  static void check(int rc, const std::string& what) {
    if (rc != MPI_SUCCESS) throw Error(what + ": MPI failed: " + mpi_error(rc));
  }
  void check_aborted(const std::string& what, int64_t position) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.empty())
      throw Error(what + " on device " + device_name(mesh_.devices()[static_cast<size_t>(position)]) + ": " + aborted_);
  }
  // Pending requests may still touch their buffers: cancel them and keep the buffers alive.
  static void abandon(std::vector<MPI_Request>& reqs, const std::vector<Array>& bufs, const Array& piece) {
    for (MPI_Request& r : reqs)
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    static std::mutex mu;
    static std::vector<Array> kept;
    std::lock_guard<std::mutex> lock(mu);
    kept.insert(kept.end(), bufs.begin(), bufs.end());
    kept.push_back(piece);
  }

  Mesh mesh_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::string aborted_;
};
#endif

}  // namespace

int64_t devices_per_process() { return processes().per_process; }
bool multi_process() { return processes().size > 1; }

int owner_process(Device d) {
  if (!multi_process()) return 0;
  return static_cast<int>(d.index / processes().per_process);
}
bool is_local(Device d) { return owner_process(d) == processes().rank; }

std::unique_ptr<Communicator> make_communicator(const Mesh& mesh) {
#ifdef PALLADIUM_HAVE_MPI
  if (multi_process()) return with_nccl(mesh, std::make_unique<MpiCommunicator>(mesh));
#endif
  return with_nccl(mesh, std::make_unique<InProcessCommunicator>(mesh.size()));
}

void broadcast_from(Array& buf, int root) {
#ifdef PALLADIUM_HAVE_MPI
  if (!multi_process()) return;
  const int rc = MPI_Bcast(buf.data(), static_cast<int>(buf.nbytes()), MPI_BYTE, root, processes().comm);
  if (rc != MPI_SUCCESS) throw Error("gathering a sharded Array across processes: MPI failed: " + mpi_error(rc));
#else
  (void)buf;
  (void)root;
#endif
}

int64_t cpu_devices_from_env();  // mesh.cc

int64_t gpus_per_process(int gpus, int processes) {
  PL_CHECK(processes > 0 && gpus % processes == 0, "distributed::initialize: ", processes,
           " processes cannot share this host's ", gpus, " GPUs equally; start a number of processes that divides ", gpus,
           " (or set CUDA_VISIBLE_DEVICES, or PALLADIUM_PLATFORM=cpu)");
  return gpus / processes;
}

}  // namespace sharding

namespace distributed {

void initialize() {
  sharding::Processes& p = sharding::processes();
  if (p.initialized) return;
#ifdef PALLADIUM_HAVE_MPI
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    PL_CHECK(provided >= MPI_THREAD_MULTIPLE, "distributed::initialize: this MPI does not support MPI_THREAD_MULTIPLE, "
                                              "which the device threads need");
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &p.comm);
  MPI_Comm_set_errhandler(p.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(p.comm, &p.rank);
  MPI_Comm_size(p.comm, &p.size);
  const int gpus = sharding::sharding_gpu_count();
  if (gpus > 0) {
    // GPUs: the processes share one host and its GPUs, each owning an equal run of them (process r
    // the GPUs r * per .. r * per + per - 1), so a device's number is its CUDA ordinal everywhere.
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(host, &len);
    std::vector<char> hosts(static_cast<size_t>(p.size) * MPI_MAX_PROCESSOR_NAME);
    MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, p.comm);
    for (int r = 0; r < p.size; ++r) {
      const std::string other(hosts.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
      PL_CHECK(other == host, "distributed::initialize: process ", r, " runs on host '", other, "' but process ", p.rank,
               " on '", host, "'; GPUs across hosts are not supported yet: run every process on one host, or use "
               "PALLADIUM_PLATFORM=cpu");
    }
  }
  p.per_process = gpus > 0 ? sharding::gpus_per_process(gpus, p.size) : sharding::cpu_devices_from_env();
  std::vector<long long> counts(static_cast<size_t>(p.size));
  long long mine = p.per_process;
  MPI_Allgather(&mine, 1, MPI_LONG_LONG, counts.data(), 1, MPI_LONG_LONG, p.comm);
  for (int r = 0; r < p.size; ++r)
    PL_CHECK(counts[static_cast<size_t>(r)] == mine, "distributed::initialize: process ", r, " brings ",
             counts[static_cast<size_t>(r)], " devices but process ", p.rank, " brings ", mine,
             "; every process must bring the same number (", gpus > 0 ? "GPUs" : "PALLADIUM_CPU_DEVICES", ")");
  p.initialized = true;
#else
  throw Error("distributed::initialize: Palladium was built without MPI; install libopenmpi-dev (tools/install_deps.sh) "
              "and rebuild");
#endif
}

bool is_initialized() { return sharding::processes().initialized; }
int process_index() { return sharding::processes().rank; }
int process_count() { return sharding::processes().size; }

}  // namespace distributed

}  // namespace palladium
