// Helpers of the bad-input tests: every bad input must raise a palladium::Error (never crash, never
// an InternalError or another exception type) whose message names the kernel, the op and what was
// wrong.
#pragma once
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "palladium/palladium.h"
#include "tests/support/test_support.h"

namespace palladium::etest {

namespace pl = palladium;
namespace jnp = palladium::jnp;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

using test_support::error_message;

// Traces and runs a one-output kernel on the interpreter (errors at trace time do not depend on
// the backend; run-time checks are the interpreter's).
template <class K, class... A>
Array run_kernel(K kernel, ShapeDtype out, CallOptions options, const A&... inputs) {
  options.backend = "interpret";
  return pallas_call(std::move(kernel), std::move(out), std::move(options))(inputs...);
}

}  // namespace palladium::etest
