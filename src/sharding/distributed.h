// Several processes (distributed.cc): which process owns which device, the communicator of an SPMD
// run (in-process, or MPI once several processes take part), and the broadcasts that gather a
// sharded Array whose pieces live in other processes.
#pragma once
#include <cstdint>
#include <memory>

#include "palladium/sharding.h"
#include "sharding/communicator.h"

namespace palladium::sharding {

// GPUs that devices() lists: 0 under PALLADIUM_PLATFORM=cpu.
int sharding_gpu_count();
// The GPUs each of `processes` processes on one host owns; an error unless they divide evenly.
int64_t gpus_per_process(int gpus, int processes);
// Devices each process brings (equal in every process), and whether several processes take part.
int64_t devices_per_process();
bool multi_process();
// The process that owns a device of devices(), and whether it is this one.
int owner_process(Device d);
bool is_local(Device d);

// The communicator for one SPMD run over `mesh`: MPI between processes, else in-process; NCCL over
// either where the mesh is all GPUs.
std::unique_ptr<Communicator> make_communicator(const Mesh& mesh);

// Every process calls this with the same `root`; afterwards `buf` holds root's bytes everywhere
// (buf must already have the right shape and dtype).
void broadcast_from(Array& buf, int root);

}  // namespace palladium::sharding
