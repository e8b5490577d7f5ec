// The worker threads and the job queue they share with callers (thread_pool.h).
#include "backends/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "palladium/error.h"

namespace palladium::cpu {

namespace {

int threads_from_env() {
  if (const char* v = std::getenv("PALLADIUM_NUM_THREADS"); v && *v) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && n >= 1 && n <= 4096) return static_cast<int>(n);
    throw Error(std::string("PALLADIUM_NUM_THREADS='") + v + "' is not a thread count between 1 and 4096");
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

uint64_t stack_from_env() {
  constexpr uint64_t kDefaultMegabytes = 256;
  if (const char* v = std::getenv("PALLADIUM_CPU_STACK_MB"); v && *v) {
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(v, &end, 10);
    if (end != v && *end == '\0' && mb >= 1) return static_cast<uint64_t>(mb) << 20;
    throw Error(std::string("PALLADIUM_CPU_STACK_MB='") + v + "' is not a positive number of megabytes");
  }
  return kDefaultMegabytes << 20;
}

// Bytes of stack left below this point on the calling thread (0 if unknown).
int64_t stack_room() {
  thread_local const char* low = [] {
    pthread_attr_t attr;
    void* base = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return static_cast<const char*>(nullptr);
    pthread_attr_getstack(&attr, &base, &size);
    pthread_attr_destroy(&attr);
    return static_cast<const char*>(base);
  }();
  const char here = 0;
  return low ? static_cast<int64_t>(&here - low) : 0;
}

// Spins until `ready()` or about 100 us have passed; true if it became ready. A sleeping thread
// takes tens of microseconds to wake, a lot next to a small kernel.
template <class Ready> bool spin_until(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(100);
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return false;
  }
}

}  // namespace

struct ThreadPool::Job {
  int64_t total = 0, chunk = 1;
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable finished_cv;
  std::atomic<bool> finished{false};
  std::exception_ptr error;
};

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool(threads_from_env(), stack_from_env());
  return pool;
}

ThreadPool::ThreadPool(int threads, uint64_t stack_bytes) : size_(std::max(1, threads)) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  // A smaller stack where the system refuses a large one (strict overcommit).
  for (stack_bytes_ = stack_bytes; stack_bytes_ > (8u << 20); stack_bytes_ /= 2) {
    pthread_t probe;
    if (pthread_attr_setstacksize(&attr, stack_bytes_) == 0 &&
        pthread_create(&probe, &attr, [](void*) -> void* { return nullptr; }, nullptr) == 0) {
      pthread_join(probe, nullptr);
      break;
    }
  }
  pthread_attr_setstacksize(&attr, stack_bytes_);
  // At least one worker: the caller cannot always join in (its stack may be too small).
  for (int i = 0; i < std::max(1, threads - 1); ++i) {
    pthread_t t;
    if (pthread_create(&t, &attr, &ThreadPool::worker_main, this) != 0) break;
    threads_.push_back(t);
  }
  pthread_attr_destroy(&attr);
  if (threads_.empty()) throw Error("the cpu backend could not start a worker thread");
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (pthread_t t : threads_) pthread_join(t, nullptr);
}

void* ThreadPool::worker_main(void* pool) {
  static_cast<ThreadPool*>(pool)->work();
  return nullptr;
}

void ThreadPool::take_chunks(Job& job) {
  while (true) {
    const int64_t begin = job.next.fetch_add(job.chunk);
    if (begin >= job.total) return;
    const int64_t end = std::min(job.total, begin + job.chunk);
    try {
      (*job.fn)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.mu);
      if (!job.error) job.error = std::current_exception();
    }
    if (job.done.fetch_add(end - begin) + (end - begin) == job.total) {
      std::lock_guard<std::mutex> lock(job.mu);
      job.finished.store(true, std::memory_order_release);
      job.finished_cv.notify_all();
    }
  }
}

void ThreadPool::work() {
  uint64_t seen = 0;
  while (true) {
    spin_until([&] { return posted_.load(std::memory_order_acquire) != seen; });
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleepers_;
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      --sleepers_;
      if (stopping_) return;
      job = queue_.front();
      seen = posted_.load(std::memory_order_relaxed);
    }
    take_chunks(*job);
    // Every chunk is handed out: retire the job so idle workers wait for the next one.
    std::lock_guard<std::mutex> lock(mu_);
    if (!queue_.empty() && queue_.front() == job) queue_.pop_front();
  }
}

void ThreadPool::run(int64_t total, int64_t chunk, int64_t frame_bytes,
                     const std::function<void(int64_t, int64_t)>& fn) {
  if (total <= 0) return;
  // Room for the frame plus what the caller's own code below may still need.
  constexpr int64_t kCallerMargin = int64_t{512} << 10;
  const bool caller_fits = stack_room() > frame_bytes + kCallerMargin;
  if (size_ == 1 && caller_fits) {  // one thread asked for: the caller is it
    fn(0, total);
    return;
  }
  auto job = std::make_shared<Job>();
  job->total = total;
  job->chunk = std::max<int64_t>(1, chunk);
  job->fn = &fn;
  bool anyone_asleep = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
    posted_.fetch_add(1, std::memory_order_release);
    anyone_asleep = sleepers_ > 0;
  }
  if (anyone_asleep) wake_.notify_all();
  if (caller_fits) take_chunks(*job);
  if (!spin_until([&] { return job->finished.load(std::memory_order_acquire); })) {
    std::unique_lock<std::mutex> lock(job->mu);
    job->finished_cv.wait(lock, [&] { return job->finished.load(); });
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!queue_.empty() && queue_.front() == job) queue_.pop_front();
  }
  std::lock_guard<std::mutex> lock(job->mu);  // the thread that finished it may still hold it
  if (job->error) std::rethrow_exception(job->error);
}

namespace {

struct LargeStackJob {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t total, chunk;
  std::atomic<int64_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
};

void* run_large_stack_chunks(void* arg) {
  auto& job = *static_cast<LargeStackJob*>(arg);
  for (int64_t begin; (begin = job.next.fetch_add(job.chunk)) < job.total;) {
    try {
      (*job.fn)(begin, std::min(job.total, begin + job.chunk));
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.mu);
      if (!job.error) job.error = std::current_exception();
    }
  }
  return nullptr;
}

}  // namespace

void ThreadPool::run_on_large_stacks(int64_t total, int64_t chunk, int64_t frame_bytes,
                                     const std::function<void(int64_t, int64_t)>& fn, const std::string& what) {
  if (total <= 0) return;
  LargeStackJob job;
  job.fn = &fn;
  job.total = total;
  job.chunk = std::max<int64_t>(1, chunk);
  // Stacks are mapped on demand, so only the pages the tiles touch cost memory.
  const size_t page = 1 << 16;
  const size_t stack = (static_cast<size_t>(frame_bytes) + page - 1) / page * page;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  std::vector<pthread_t> started;
  if (pthread_attr_setstacksize(&attr, stack) == 0) {
    const int64_t wanted = std::min<int64_t>(size(), (total + job.chunk - 1) / job.chunk);
    for (int64_t t = 0; t < wanted; ++t) {
      pthread_t thread;
      if (pthread_create(&thread, &attr, &run_large_stack_chunks, &job) != 0) break;
      started.push_back(thread);
    }
  }
  pthread_attr_destroy(&attr);
  if (started.empty())
    throw Error(what + ": one program needs about " + std::to_string(frame_bytes >> 20) +
                " MB of tile storage and the system refused a thread with a stack that large; use smaller blocks");
  for (pthread_t t : started) pthread_join(t, nullptr);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace palladium::cpu
