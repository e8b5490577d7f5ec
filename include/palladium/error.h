// User errors and internal errors are kept apart: an Error is the caller's mistake and its message
// says what to change; an InternalError is a bug in Palladium.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace palladium {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
template <class... Args> std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// PL_CHECK(cond, parts...) throws Error with the concatenated parts; PL_ASSERT is for invariants.
#define PL_CHECK(cond, ...) \
  do { if (!(cond)) throw ::palladium::Error(::palladium::detail::cat(__VA_ARGS__)); } while (0)
#define PL_ASSERT(cond, ...)                                                                   \
  do {                                                                                          \
    if (!(cond))                                                                                \
      throw ::palladium::InternalError(::palladium::detail::cat(                                \
          "internal error at ", __FILE__, ":", __LINE__, ": ", #cond, " ", ##__VA_ARGS__));     \
  } while (0)

}  // namespace palladium
