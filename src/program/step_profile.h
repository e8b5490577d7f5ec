// PALLADIUM_STEP_PROFILE=1: every run of a compiled program on a CUDA device times its steps, the
// host's time to queue each and a GPU event after each, and prints one line per step to stderr when
// the run ends (waiting for the GPU then: a diagnostic, not for timed runs). A step's GPU time is
// the gap between its event and the previous one: its own work, or the GPU idling for the host or
// for another GPU. Runs on the CPU print host times only.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "palladium/device.h"

namespace palladium::program {

class StepProfile {
 public:
  // Null unless PALLADIUM_STEP_PROFILE=1.
  static std::unique_ptr<StepProfile> start(const std::string& program, Device device);
  ~StepProfile();
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;

  void step_done(const std::string& label);
  void finish();  // waits for the GPU and prints

 private:
  StepProfile(std::string program, Device device);
  using Clock = std::chrono::steady_clock;
  std::string program_;
  Device device_;
  Clock::time_point last_;
  std::vector<std::string> labels_;
  std::vector<double> host_us_;
  std::vector<void*> events_;  // CUevent: the first before step 0, then one after each step
};

}  // namespace palladium::program
