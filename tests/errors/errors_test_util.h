// Helpers of the bad-input tests: every bad input must raise a palladium::Error (never crash, never
// an InternalError or another exception type) whose message names the kernel, the op and what was
// wrong.
#pragma once
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "palladium/palladium.h"

namespace palladium::etest {

namespace pl = palladium;
namespace jnp = palladium::jnp;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// The message of the palladium::Error that fn throws; a marker naming what happened otherwise
// (no exception, an InternalError, another exception), so that a failing test says which.
template <class Fn> std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const InternalError& e) {
    return std::string("<InternalError instead of palladium::Error: ") + e.what() + ">";
  } catch (const std::exception& e) {
    return std::string("<other exception instead of palladium::Error: ") + e.what() + ">";
  }
  return "<no palladium::Error thrown>";
}

// Traces and runs a one-output kernel on the interpreter (errors at trace time do not depend on
// the backend; run-time checks are the interpreter's).
template <class K, class... A>
Array run_kernel(K kernel, ShapeDtype out, CallOptions options, const A&... inputs) {
  options.backend = "interpret";
  return pallas_call(std::move(kernel), std::move(out), std::move(options))(inputs...);
}

}  // namespace palladium::etest
