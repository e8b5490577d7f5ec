// Helpers shared by the tests of src/core.
#pragma once
#include <string>

#include "palladium/error.h"
#include "tests/support/test_support.h"

namespace palladium::testing_util {

using test_support::error_message;

}  // namespace palladium::testing_util
