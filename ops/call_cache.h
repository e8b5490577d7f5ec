// Library ops build their pallas_call once per configuration and reuse it, so a call traces and
// compiles once per (configuration, input signature), as a jitted JAX function would.
#pragma once
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "palladium/call.h"

namespace palladium::ops {

// The key must determine everything baked into the Callable, the result shapes and dtypes
// included: a Callable made for bfloat16 inputs returns bfloat16 outputs for any later input
// signature, so call sites append result_signature(outs).
inline std::string result_signature(const std::vector<ShapeDtype>& outs) {
  std::string s;
  for (const ShapeDtype& o : outs) s += "|" + std::string(dtype_name(o.dtype)) + shape_str(o.shape);
  return s;
}

template <class R, class Make> Callable<R> cached_call(const std::string& key, Make make) {
  static std::mutex mu;
  static std::map<std::string, Callable<R>> calls;  // one map per call site (Make is unique)
  std::lock_guard<std::mutex> lock(mu);
  auto it = calls.find(key);
  if (it == calls.end()) it = calls.emplace(key, make()).first;
  return it->second;
}

}  // namespace palladium::ops
