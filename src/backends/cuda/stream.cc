// The public stream API (palladium/stream.h): CUDA streams and events through the driver, trivial
// synchronous streams on the host, and each thread's stack of StreamScopes.
#include "backends/cuda/stream.h"

#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "palladium/error.h"

namespace palladium {
namespace detail {

StreamState::~StreamState() {
  if ((!owned && !external) || !handle) return;
  // Blocks it used wait, before reuse, for what was queued on it (the owner may destroy it next).
  cuda::forget_stream(cuda::StreamRef{device.index, handle});
  if (external) return;
  // Returns at once; the driver releases the stream after its queued work completes.
  if (const cuda::DriverApi* d = cuda::driver()) d->cuStreamDestroy(handle);
}

EventState::~EventState() {
  if (handle) cuda::recycle_event(device.index, handle);
}

}  // namespace detail

namespace {

std::atomic<uint64_t> next_serial{1};

// Throws unless cuda:index can be used, naming the operation that needs it.
void require_cuda(const std::string& op, int index) {
  if (std::string why = cuda::unavailable_reason(); !why.empty()) throw Error(op + ": CUDA is unavailable: " + why);
  try {
    cuda::make_current(index);
  } catch (const Error& e) {
    throw Error(op + ": " + e.what());
  }
}

// Default streams are made once per device and never destroyed, so all handles to one compare equal.
std::shared_ptr<const detail::StreamState> default_state(const std::string& op, Device d) {
  static auto* mu = new std::mutex;
  static auto* states = new std::map<std::pair<int, int>, std::shared_ptr<const detail::StreamState>>;
  std::lock_guard<std::mutex> lock(*mu);
  std::shared_ptr<const detail::StreamState>& slot = (*states)[{d.kind, d.index}];
  if (!slot) {
    if (d.kind == Device::cuda) require_cuda(op, d.index);
    slot = std::make_shared<detail::StreamState>(d, nullptr, false, 0);
  }
  return slot;
}

struct Scoped {
  uint64_t token;
  Stream stream;
};
std::vector<Scoped>& scopes() {
  thread_local std::vector<Scoped> s;
  return s;
}

// The innermost scope's stream for `d`, else its default stream (made on first use, checked by `op`).
Stream current_for(const std::string& op, Device d) {
  const std::vector<Scoped>& s = scopes();
  for (auto it = s.rbegin(); it != s.rend(); ++it)
    if (it->stream.device() == d) return it->stream;
  return Stream(default_state(op, d));
}

}  // namespace

Stream::Stream(std::shared_ptr<const detail::StreamState> state) : state_(std::move(state)) {
  PL_ASSERT(state_ != nullptr, "a Stream without a state");
}

Device Stream::device() const { return state_->device; }
bool Stream::is_default() const { return state_->serial == 0; }

std::string Stream::str() const {
  if (state_->serial == 0) return state_->device.str() + " default stream";
  return state_->device.str() + (state_->external ? " external stream " : " stream ") + std::to_string(state_->serial);
}

void Stream::synchronize() const {
  if (device().kind == Device::cpu) return;  // host work ran when it was queued
  cuda::synchronize(cuda::stream_ref(*this), "Stream::synchronize(" + str() + ")");
}

bool Stream::done() const {
  if (device().kind == Device::cpu) return true;
  return cuda::query(cuda::stream_ref(*this), "Stream::done(" + str() + ")");
}

void Stream::wait(const Event& e) const {
  if (e.device().kind != device().kind)
    throw Error("Stream::wait: " + str() + " cannot wait on an event recorded on " + e.state().stream +
                ": cpu and CUDA streams do not order each other's work (" +
                (device().kind == Device::cpu ? "event.synchronize() blocks the host until the event is done"
                                              : "work on a cpu stream is done when record returns") +
                ")");
  if (device().kind == Device::cpu) return;
  cuda::wait_event(cuda::stream_ref(*this), e.state().handle,
                   "Stream::wait(" + str() + " on an event of " + e.state().stream + ")");
}

Event::Event(std::shared_ptr<const detail::EventState> state) : state_(std::move(state)) {
  PL_ASSERT(state_ != nullptr, "an Event without a state");
}

Device Event::device() const { return state_->device; }

void Event::synchronize() const {
  if (device().kind == Device::cpu) return;
  cuda::check_driver(cuda::require_driver().cuEventSynchronize(state_->handle),
                     "Event::synchronize(event recorded on " + state_->stream + ")");
}

bool Event::done() const {
  if (device().kind == Device::cpu) return true;
  const cuda::CUresult r = cuda::require_driver().cuEventQuery(state_->handle);
  if (r == cuda::kErrorNotReady) return false;
  cuda::check_driver(r, "Event::done(event recorded on " + state_->stream + ")");
  return true;
}

Stream new_stream(Device d) {
  const uint64_t serial = next_serial++;
  if (d.kind == Device::cpu) return Stream(std::make_shared<detail::StreamState>(d, nullptr, false, serial));
  const std::string op = "new_stream(" + d.str() + ")";
  require_cuda(op, d.index);
  cuda::CUstream h = nullptr;
  cuda::check_driver(cuda::require_driver().cuStreamCreate(&h, cuda::kStreamNonBlocking), op + ": cuStreamCreate");
  return Stream(std::make_shared<detail::StreamState>(d, h, true, serial));
}

Stream external_stream(Device d, void* handle) {
  const std::string op = "external_stream(" + d.str() + ")";
  PL_CHECK(d.kind == Device::cuda, op, ": only CUDA devices have streams of other libraries");
  if (handle == nullptr) return default_stream(d);
  require_cuda(op, d.index);
  auto state = std::make_shared<detail::StreamState>(d, static_cast<cuda::CUstream>(handle), false, next_serial++);
  state->external = true;
  return Stream(std::move(state));
}

Stream default_stream(Device d) { return Stream(default_state("default_stream(" + d.str() + ")", d)); }

Stream current_stream(Device d) { return current_for("current_stream(" + d.str() + ")", d); }

Event record(const Stream& s) {
  if (s.device().kind == Device::cpu) return Event(std::make_shared<detail::EventState>(s.device(), nullptr, s.str()));
  cuda::CUevent e = cuda::record_event(cuda::stream_ref(s), "record(" + s.str() + ")");
  return Event(std::make_shared<detail::EventState>(s.device(), e, s.str()));
}

StreamScope::StreamScope(const Stream& s) {
  thread_local uint64_t tokens = 0;
  token_ = ++tokens;
  scopes().push_back(Scoped{token_, s});
}

StreamScope::~StreamScope() {
  std::vector<Scoped>& s = scopes();
  for (auto it = s.end(); it != s.begin();) {
    --it;
    if (it->token == token_) {
      s.erase(it);
      return;
    }
  }
}

}  // namespace palladium

namespace palladium::cuda {

StreamRef stream_ref(const Stream& s) {
  PL_ASSERT(s.device().kind == Device::cuda, "a CUDA stream expected, got ", s.str());
  return StreamRef{s.device().index, s.state().handle};
}

Stream current_stream_for(const std::string& op, int ordinal) { return current_for(op, Device{Device::cuda, ordinal}); }

std::optional<Stream> innermost_scope() {
  const std::vector<Scoped>& s = scopes();
  if (s.empty()) return std::nullopt;
  return s.back().stream;
}

bool has_scope_for(Device d) {
  for (const Scoped& s : scopes())
    if (s.stream.device() == d) return true;
  return false;
}

}  // namespace palladium::cuda
