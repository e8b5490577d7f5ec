// Helpers every test binary may use (header only: tests/support builds no binary of its own).
#pragma once
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "palladium/error.h"
#include "palladium/numpy.h"
#include "palladium/random.h"

namespace palladium::test_support {

// How error_message's markers name an expected exception type.
template <class E> const char* exception_name() {
  if constexpr (std::is_same_v<E, Error>) return "palladium::Error";
  else if constexpr (std::is_same_v<E, InternalError>) return "InternalError";
  else return typeid(E).name();
}

// The message of the exception of type E (by default palladium::Error) that fn throws; otherwise a
// marker naming what happened ("<no palladium::Error thrown>", "<InternalError instead of
// palladium::Error: ...>", "<other exception instead of ...>"), so a failing check says which.
template <class E = Error, class Fn> std::string error_message(Fn&& fn) {
  const std::string expected = exception_name<E>();
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    const char* thrown = dynamic_cast<const Error*>(&e)           ? "palladium::Error"
                         : dynamic_cast<const InternalError*>(&e) ? "InternalError"
                                                                  : "other exception";
    return std::string("<") + thrown + " instead of " + expected + ": " + e.what() + ">";
  }
  return "<no " + expected + " thrown>";
}

// Expects `expr` to throw a palladium::Error whose message contains `text`; prints the message (or
// what happened instead) when it does not.
#define PL_EXPECT_ERROR(expr, text)                                                                      \
  do {                                                                                                   \
    const std::string pl_message_ = ::palladium::test_support::error_message([&] { (void)(expr); });    \
    EXPECT_NE(pl_message_.find(text), std::string::npos) << pl_message_;                                \
  } while (0)

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

// Standard normal float32 values drawn from the key `seed` (fresh data, never zeros).
inline Array randn(Shape shape, uint64_t seed) { return random::normal(random::key(seed), std::move(shape)); }

// Whether `part` occurs in `s` (printed programs, messages).
inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The small regression loss the data-parallel tests differentiate: mean((tanh(x w) - y)^2).
inline Array tanh_regression_loss(const Array& w, const Array& x, const Array& y) {
  return jnp::mean(jnp::square(jnp::tanh(jnp::matmul(x, w)) - y));
}

}  // namespace palladium::test_support
