// Library ops build their pallas_call once per configuration and reuse it, so a call traces and
// compiles once per (configuration, input signature), as a jitted JAX function would.
#pragma once
#include <map>
#include <mutex>
#include <string>

#include "palladium/call.h"

namespace palladium::ops {

template <class R, class Make> Callable<R> cached_call(const std::string& key, Make make) {
  static std::mutex mu;
  static std::map<std::string, Callable<R>> calls;  // one map per call site (Make is unique)
  std::lock_guard<std::mutex> lock(mu);
  auto it = calls.find(key);
  if (it == calls.end()) it = calls.emplace(key, make()).first;
  return it->second;
}

}  // namespace palladium::ops
