// The stream-aware caching allocator and the event pool.
//
// cuMemAlloc/cuMemFree synchronise the device and cost tens of microseconds, too much for every
// pallas_call, so freed blocks are cached per (device, rounded size). A block freed while queued
// work may still use it is safe to hand out again only in order after that work: each live block
// keeps the streams that used it. A block used on one stream only is reused at once by that stream
// (its new work queues behind the old); any other reuse first makes the new stream wait, on the
// device, for events recorded on the old streams. The host never blocks, except on out-of-memory,
// where the cache is returned to the driver after the device is synchronised.
#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "backends/cuda/device_runtime.h"
#include "palladium/error.h"

namespace palladium::cuda {
namespace {

struct EventPool {
  std::mutex mu;
  std::map<int, std::vector<CUevent>> idle;  // by device: events belong to the device's context
};
EventPool& event_pool() {
  static EventPool* p = new EventPool;  // never destroyed: blocks may be freed during exit
  return *p;
}

// A recorded event that goes back to the pool when the last block waiting on it lets go.
struct PendingWork {
  int device = 0;
  CUevent event = nullptr;
  PendingWork(int d, CUevent e) : device(d), event(e) {}
  PendingWork(const PendingWork&) = delete;
  PendingWork& operator=(const PendingWork&) = delete;
  ~PendingWork() { recycle_event(device, event); }
  bool done() const { return require_driver().cuEventQuery(event) == 0; }
};
using Pending = std::shared_ptr<PendingWork>;

Pending record_pending(StreamRef stream, const std::string& what) {
  return std::make_shared<PendingWork>(stream.device, record_event(stream, what));
}

// Either `uses` names the one stream that used the block and `pending` is empty (a block reusable
// at once on that stream), or the work of every stream that used it is in `pending`.
struct Block {
  int device = 0;
  size_t size = 0;
  std::vector<StreamRef> uses;
  std::vector<Pending> pending;
  bool only_used_on(StreamRef s) const { return pending.empty() && uses.size() == 1 && uses[0] == s; }
};

struct CachedBlock {
  CUdeviceptr ptr = 0;
  Block block;
};

struct Allocator {
  std::mutex mu;
  std::map<CUdeviceptr, Block> live;  // ordered: a view's pointer finds the block that holds it
  std::map<std::pair<int, size_t>, std::vector<CachedBlock>> cached;  // (device, size)
};
Allocator& allocator() {
  static Allocator* a = new Allocator;  // never destroyed: Arrays may be freed during exit
  return *a;
}

size_t rounded(size_t bytes) {
  const size_t granule = bytes < (1u << 20) ? 512 : (2u << 20);
  return (std::max<size_t>(bytes, 1) + granule - 1) / granule * granule;
}

// Captures the queued work of every stream in b.uses in events; afterwards b.uses is empty.
void capture_uses(Block& b, const std::string& what) {
  for (const StreamRef& s : b.uses) b.pending.push_back(record_pending(s, what));
  b.uses.clear();
}

// Makes `stream` wait for everything that may still use b, then gives b to `stream` alone.
void hand_over(Block& b, StreamRef stream) {
  if (b.only_used_on(stream)) return;
  const std::string what = "reusing cached device memory on cuda:" + std::to_string(stream.device);
  for (const StreamRef& s : b.uses) order_after(stream, s, what);
  for (const Pending& p : b.pending) wait_event(stream, p->event, what);
  b.uses.assign(1, stream);
  b.pending.clear();  // the waits are queued; later reuse of the events does not affect them
}

// Returns the cached blocks of a device to the driver. They may still be in use by queued work on
// any stream (of this device, or of another one for a peer copy), so all of it is waited for first.
void free_cached(Allocator& a, int ordinal) {
  make_current(ordinal);
  require_driver().cuCtxSynchronize();
  for (auto& [key, blocks] : a.cached) {
    if (key.first != ordinal) continue;
    for (CachedBlock& c : blocks) {
      for (const Pending& p : c.block.pending)
        if (p->device != ordinal) require_driver().cuEventSynchronize(p->event);
      c.block.pending.clear();
      make_current(ordinal);
      require_driver().cuMemFree(c.ptr);
    }
    blocks.clear();
  }
}

}  // namespace

CUevent acquire_event(int ordinal) {
  EventPool& pool = event_pool();
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    std::vector<CUevent>& idle = pool.idle[ordinal];
    if (!idle.empty()) {
      CUevent e = idle.back();
      idle.pop_back();
      return e;
    }
  }
  make_current(ordinal);
  CUevent e = nullptr;
  check_driver(require_driver().cuEventCreate(&e, kEventDisableTiming),
               "cuda:" + std::to_string(ordinal) + ": creating an event");
  return e;
}

void recycle_event(int ordinal, CUevent e) noexcept {
  if (!e) return;
  try {
    EventPool& pool = event_pool();
    std::lock_guard<std::mutex> lock(pool.mu);
    pool.idle[ordinal].push_back(e);
  } catch (...) {  // out of memory growing the pool: the event is leaked
  }
}

CUevent record_event(StreamRef stream, const std::string& what) {
  CUevent e = acquire_event(stream.device);
  make_current(stream.device);
  if (CUresult r = require_driver().cuEventRecord(e, stream.handle); r != 0) {
    recycle_event(stream.device, e);
    throw Error(what + ": recording an event: " + driver_error_text(r));
  }
  return e;
}

void wait_event(StreamRef stream, CUevent e, const std::string& what) {
  make_current(stream.device);
  check_driver(require_driver().cuStreamWaitEvent(stream.handle, e, 0), what);
}

void order_after(StreamRef waiter, StreamRef producer, const std::string& what) {
  if (waiter == producer) return;
  CUevent e = record_event(producer, what);
  try {
    wait_event(waiter, e, what);
  } catch (...) {
    recycle_event(producer.device, e);
    throw;
  }
  recycle_event(producer.device, e);
}

CUdeviceptr allocate(int ordinal, size_t bytes, StreamRef stream) {
  PL_ASSERT(stream.device == ordinal, "allocating on cuda:", ordinal, " for a stream of cuda:", stream.device);
  const size_t size = rounded(bytes);
  Allocator& a = allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  std::vector<CachedBlock>& blocks = a.cached[{ordinal, size}];
  if (!blocks.empty()) {
    // Prefer a block this stream alone used (no wait at all); else the most recently freed one.
    auto it = std::find_if(blocks.rbegin(), blocks.rend(), [&](const CachedBlock& c) { return c.block.only_used_on(stream); });
    if (it == blocks.rend()) it = blocks.rbegin();
    CachedBlock c = std::move(*it);
    blocks.erase(std::next(it).base());
    hand_over(c.block, stream);  // on a driver error the block is dropped: its state is unknown
    a.live.emplace(c.ptr, std::move(c.block));
    return c.ptr;
  }
  make_current(ordinal);
  CUdeviceptr p = 0;
  CUresult r = require_driver().cuMemAlloc(&p, size);
  if (r != 0) {  // give the cache back to the driver and try once more
    free_cached(a, ordinal);
    make_current(ordinal);
    r = require_driver().cuMemAlloc(&p, size);
  }
  if (r != 0)
    throw Error("cuda:" + std::to_string(ordinal) + ": cannot allocate " + std::to_string(bytes) +
                " bytes of device memory: " + driver_error_text(r));
  Block b;
  b.device = ordinal;
  b.size = size;
  b.uses.push_back(stream);
  a.live.emplace(p, std::move(b));
  return p;
}

CUdeviceptr allocate(int ordinal, size_t bytes) { return allocate(ordinal, bytes, StreamRef{ordinal, nullptr}); }

void release(CUdeviceptr p) {
  if (!p) return;
  Allocator& a = allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = a.live.find(p);
  if (it == a.live.end()) return;
  Block b = std::move(it->second);
  a.live.erase(it);
  try {
    if (b.uses.size() != 1 || !b.pending.empty()) capture_uses(b, "freeing device memory");
    const size_t size = b.size;
    a.cached[{b.device, size}].push_back(CachedBlock{p, std::move(b)});
  } catch (...) {
    // The block's queued work could not be captured (the context is failing or shutting down):
    // dropping it, rather than caching it, keeps it from being reused too early.
  }
}

// The live block that holds `p` (its start, or inside it: an Array that views part of another).
static std::map<CUdeviceptr, Block>::iterator holding(Allocator& a, CUdeviceptr p) {
  auto it = a.live.upper_bound(p);
  if (it == a.live.begin()) return a.live.end();
  --it;
  return p < it->first + it->second.size ? it : a.live.end();
}

void record_use(CUdeviceptr p, StreamRef stream) {
  Allocator& a = allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = holding(a, p);
  if (it == a.live.end()) return;  // not from this allocator
  std::vector<StreamRef>& uses = it->second.uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

void wait_for_uses(CUdeviceptr p, StreamRef stream, const std::string& what) {
  Allocator& a = allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = holding(a, p);
  if (it == a.live.end()) return;
  for (const StreamRef& s : it->second.uses) order_after(stream, s, what);
  for (const Pending& w : it->second.pending) wait_event(stream, w->event, what);
}

void forget_stream(StreamRef stream) noexcept {
  Allocator& a = allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  Pending last;  // one event captures the stream's queued work for every block it used
  auto capture = [&](Block& b) {
    auto at = std::find(b.uses.begin(), b.uses.end(), stream);
    if (at == b.uses.end()) return;
    if (!last) last = record_pending(stream, "destroying a stream");
    b.uses.erase(at);
    // Drop finished work, so a long-lived block used by many short-lived streams stays small.
    std::erase_if(b.pending, [](const Pending& w) { return w->done(); });
    b.pending.push_back(last);
  };
  try {
    for (auto& [ptr, b] : a.live) capture(b);
    for (auto& [key, blocks] : a.cached)
      for (CachedBlock& c : blocks) capture(c.block);
  } catch (...) {
    // No event could be recorded: the driver is failing or shutting down. Dropping every cached
    // block that the stream used keeps them from being reused too early.
    for (auto& [key, blocks] : a.cached)
      std::erase_if(blocks, [&](const CachedBlock& c) {
        return std::find(c.block.uses.begin(), c.block.uses.end(), stream) != c.block.uses.end();
      });
  }
}

std::shared_ptr<Storage> device_storage(int ordinal, size_t bytes, StreamRef stream) {
  auto s = std::make_shared<Storage>();
  s->ptr = reinterpret_cast<void*>(allocate(ordinal, bytes, stream));
  s->nbytes = bytes;
  s->device = Device{Device::cuda, ordinal};
  s->free_fn = [](void* p) { release(reinterpret_cast<CUdeviceptr>(p)); };
  return s;
}

Array device_array(const Shape& shape, DType dtype, int ordinal, StreamRef stream) {
  const size_t bytes = static_cast<size_t>(numel(shape)) * static_cast<size_t>(itemsize(dtype));
  return Array(shape, dtype, device_storage(ordinal, bytes, stream));
}

}  // namespace palladium::cuda
