// The in-process communicator: one rendezvous per collective and group. Members are matched by
// how many exchanges each has made (every device runs the same program, so its k-th exchange is
// everyone's k-th), and pieces are shared, not copied: virtual CPU devices share the host memory.
#include <cstdlib>

#include "sharding/communicator.h"

namespace palladium::sharding {

std::chrono::milliseconds collective_timeout() {
  const char* v = std::getenv("PALLADIUM_COLLECTIVE_TIMEOUT_S");
  if (v == nullptr || *v == '\0') return std::chrono::milliseconds(300'000);
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s > 0))
    throw Error(std::string("PALLADIUM_COLLECTIVE_TIMEOUT_S='") + v + "' is not a positive number of seconds");
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

namespace {

thread_local const SpmdContext* t_context = nullptr;

}  // namespace

InProcessCommunicator::InProcessCommunicator(int64_t devices)
    : sequence_(static_cast<size_t>(devices), 0), timeout_(collective_timeout()) {}

std::vector<Array> InProcessCommunicator::exchange(int64_t position, const std::vector<int64_t>& group,
                                                   const Array& mine, const std::string& what) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.empty()) throw Error(what + " on device " + std::to_string(position) + ": " + aborted_);
  size_t index = group.size();
  for (size_t i = 0; i < group.size(); ++i)
    if (group[i] == position) index = i;
  PL_ASSERT(index < group.size(), what, ": device ", position, " is not in its own group");
  const int64_t seq = sequence_.at(static_cast<size_t>(position))++;
  const auto key = std::make_pair(seq, group.front());
  std::shared_ptr<Rendezvous>& slot = open_[key];
  if (!slot) {
    slot = std::make_shared<Rendezvous>();
    slot->pieces.resize(group.size());
    slot->arrived.assign(group.size(), false);
    slot->left = static_cast<int64_t>(group.size());
  }
  std::shared_ptr<Rendezvous> r = slot;
  r->pieces[index] = mine;
  r->arrived[index] = true;
  ++r->count;
  cv_.notify_all();
  const bool done = cv_.wait_for(lock, timeout_, [&] {
    return r->count == static_cast<int64_t>(group.size()) || !aborted_.empty();
  });
  if (!aborted_.empty()) throw Error(what + " on device " + std::to_string(position) + ": " + aborted_);
  if (!done) {
    std::string missing;
    for (size_t i = 0; i < group.size(); ++i)
      if (!r->arrived[i]) missing += (missing.empty() ? "" : ", ") + std::to_string(group[i]);
    aborted_ = what + " timed out: device " + std::to_string(position) + " waited " +
               std::to_string(timeout_.count() / 1000.0) + " s for device(s) " + missing +
               " (PALLADIUM_COLLECTIVE_TIMEOUT_S sets the limit)";
    cv_.notify_all();
    throw Error(aborted_);
  }
  std::vector<Array> all = r->pieces;
  if (--r->left == 0) open_.erase(key);
  return all;
}

void InProcessCommunicator::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.empty()) aborted_ = why;
  cv_.notify_all();
}

const SpmdContext* spmd_context() { return t_context; }
ScopedSpmdContext::ScopedSpmdContext(const SpmdContext* c) : saved_(t_context) { t_context = c; }
ScopedSpmdContext::~ScopedSpmdContext() { t_context = saved_; }

}  // namespace palladium::sharding
