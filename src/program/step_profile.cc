#include "program/step_profile.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "backends/cuda/device_runtime.h"
#include "backends/cuda/stream.h"
#include "palladium/stream.h"

namespace palladium::program {

namespace {

bool enabled() {
  const char* v = std::getenv("PALLADIUM_STEP_PROFILE");
  return v && std::string(v) == "1";
}

cuda::CUevent timed_event_on(Device d, const std::string& what) {
  cuda::make_current(d.index);
  cuda::CUevent e = nullptr;
  cuda::check_driver(cuda::require_driver().cuEventCreate(&e, 0), what + ": creating a timing event");
  const cuda::StreamRef s = cuda::stream_ref(cuda::current_stream_for(what, d.index));
  cuda::check_driver(cuda::require_driver().cuEventRecord(e, static_cast<cuda::CUstream>(s.handle)),
                     what + ": recording a timing event");
  return e;
}

}  // namespace

std::unique_ptr<StepProfile> StepProfile::start(const std::string& program, Device device) {
  if (!enabled()) return nullptr;
  return std::unique_ptr<StepProfile>(new StepProfile(program, device));
}

StepProfile::StepProfile(std::string program, Device device) : program_(std::move(program)), device_(device) {
  if (device_.kind == Device::cuda) events_.push_back(timed_event_on(device_, "step profile of " + program_));
  last_ = Clock::now();
}

StepProfile::~StepProfile() {
  for (void* e : events_) cuda::require_driver().cuEventDestroy(static_cast<cuda::CUevent>(e));
}

void StepProfile::step_done(const std::string& label) {
  const Clock::time_point now = Clock::now();
  host_us_.push_back(std::chrono::duration<double, std::micro>(now - last_).count());
  labels_.push_back(label);
  if (device_.kind == Device::cuda) events_.push_back(timed_event_on(device_, "step profile of " + program_));
  last_ = Clock::now();  // the event's own cost is not the next step's
}

void StepProfile::finish() {
  std::vector<float> gpu_ms(labels_.size(), 0.0f);
  if (!events_.empty()) {
    auto& d = cuda::require_driver();
    cuda::check_driver(d.cuEventSynchronize(static_cast<cuda::CUevent>(events_.back())), "step profile: waiting");
    for (size_t k = 0; k < labels_.size(); ++k)
      cuda::check_driver(d.cuEventElapsedTime(&gpu_ms[k], static_cast<cuda::CUevent>(events_[k]),
                                              static_cast<cuda::CUevent>(events_[k + 1])),
                         "step profile: reading the GPU time of step " + std::to_string(k));
  }
  static std::mutex mu;  // lines of programs run by several device threads do not interleave
  std::lock_guard<std::mutex> lock(mu);
  double host = 0, gpu = 0;
  for (size_t k = 0; k < labels_.size(); ++k) {
    std::fprintf(stderr, "STEP %s %s #%zu %-60.60s host %8.1f us  gpu %8.1f us\n", device_.str().c_str(), program_.c_str(),
                 k, labels_[k].c_str(), host_us_[k], gpu_ms[k] * 1e3);
    host += host_us_[k];
    gpu += gpu_ms[k];
  }
  std::fprintf(stderr, "STEPS %s %s: %zu steps, host %.3f ms, gpu %.3f ms\n", device_.str().c_str(), program_.c_str(),
               labels_.size(), host / 1e3, gpu);
}

}  // namespace palladium::program
