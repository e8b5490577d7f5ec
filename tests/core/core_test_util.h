// Helpers shared by the tests of src/core.
#pragma once
#include <string>

#include "palladium/error.h"

namespace palladium::testing_util {

// The message of the palladium::Error that fn throws, or a marker when it throws none.
template <class Fn> std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no palladium::Error thrown>";
}

}  // namespace palladium::testing_util
