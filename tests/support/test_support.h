// Helpers every test binary may use (header only: tests/support builds no binary of its own).
#pragma once
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>

#include "palladium/error.h"

namespace palladium::test_support {

// The message of the palladium::Error that fn throws; otherwise a marker naming what happened
// (no exception, an InternalError, another exception type), so a failing check says which.
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

// Sets an environment variable for the scope of a test, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace palladium::test_support
