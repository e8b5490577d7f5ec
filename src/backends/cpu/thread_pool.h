// The threads that run the programs of a grid: the calling thread plus size() - 1 workers.
// Generated kernels keep their tiles on the stack (see emitter.h), so workers get large stacks,
// and the caller joins in only when its own stack has room for a program's frame. Idle workers
// spin briefly before sleeping, since kernels are often called back to back.
//
// PALLADIUM_NUM_THREADS sets size() (default: every hardware thread); PALLADIUM_CPU_STACK_MB the
// stack of each worker (default 256; only the pages a kernel touches cost memory).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <pthread.h>

namespace palladium::cpu {

class ThreadPool {
 public:
  // The process-wide pool, started on first use.
  static ThreadPool& instance();
  // A pool of `threads` (the caller included) with workers' stacks of stack_bytes; instance()
  // is the one kernels use, others are for tests.
  ThreadPool(int threads, uint64_t stack_bytes);

  // Threads that run programs, the caller included.
  int size() const { return size_; }
  uint64_t stack_bytes() const { return stack_bytes_; }

  // Calls fn(begin, end) for consecutive chunks covering [0, total) and returns when all are done;
  // the first exception a chunk throws is rethrown here. frame_bytes is the stack fn needs (the
  // caller takes chunks only if it has that much room). Several callers may run at once.
  void run(int64_t total, int64_t chunk, int64_t frame_bytes, const std::function<void(int64_t, int64_t)>& fn);

  // As run, for frames larger than a worker's stack: the chunks run on size() threads started for
  // this call with stacks of frame_bytes each (fewer threads where the system refuses that much).
  // Throws Error naming `what` when not even one such thread can start.
  void run_on_large_stacks(int64_t total, int64_t chunk, int64_t frame_bytes,
                           const std::function<void(int64_t, int64_t)>& fn, const std::string& what);

  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

 private:
  struct Job;
  static void* worker_main(void* pool);
  void work();
  // Runs chunks of `job` until none are left.
  void take_chunks(Job& job);

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<uint64_t> posted_{0};  // jobs ever queued: spinning workers watch it
  int sleepers_ = 0;                 // workers blocked on wake_ (guarded by mu_)
  bool stopping_ = false;
  std::vector<pthread_t> threads_;
  int size_ = 1;  // as asked for; with 1 the caller runs every chunk itself when its stack allows
  uint64_t stack_bytes_ = 0;
};

}  // namespace palladium::cpu
