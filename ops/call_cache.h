// Library ops build their pallas_call once per configuration and reuse it, so a call traces and
// compiles once per (configuration, input signature), as a jitted JAX function would.
#pragma once
#include <charconv>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "palladium/call.h"

namespace palladium::ops {

// v written exactly (a hexfloat): two parameters that print alike at 6 digits must not share a call.
// std::to_chars, not a stream: it needs no locale. (A stream's floating-point output here crashed on
// a null pointer inside libstdc++ when JAX 0.11 on the GPU machine called the XLA FFI example.)
inline std::string exact(double v) {
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::hex);
  return std::string(buf, r.ptr);
}

// The key of a library op's pallas_call: everything baked into the Callable. That is the kernel's
// captured parameters (`params`, written by the caller, floats with exact()), every CallOptions
// field that is not a BlockSpec (the specs follow from the parameters and the shapes), and the
// result shapes and dtypes (a Callable made for bfloat16 results returns bfloat16 for any later
// input signature). A new CallOptions or CompilerParams field belongs here too.
inline std::string call_key(const std::string& params, const CallOptions& c, const std::vector<ShapeDtype>& outs) {
  std::ostringstream s;
  s << c.name << "(" << params << ") grid " << shape_str(c.grid) << " backend " << c.backend << (c.interpret ? "+i" : "")
    << (c.debug ? "+debug" : "") << " warps " << c.compiler_params.num_warps << " stages " << c.compiler_params.num_stages
    << (c.compiler_params.allow_tf32 ? " tf32" : "") << (c.compiler_params.fast_math ? " fast" : "")
    << (c.compiler_params.checks ? " checked" : "") << " prefetch " << c.num_scalar_prefetch;
  for (DimensionSemantics d : c.dimension_semantics) s << (d == DimensionSemantics::arbitrary ? " arb" : " par");
  for (const ShapeDtype& t : c.scratch_shapes) s << " scratch " << dtype_name(t.dtype) << shape_str(t.shape);
  for (const auto& [in, out] : c.input_output_aliases) s << " alias " << in << ">" << out;
  for (const ShapeDtype& o : outs) s << " -> " << dtype_name(o.dtype) << shape_str(o.shape);
  return s.str();
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
