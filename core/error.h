// Errors. EMBER_CHECK is for anything a user can cause (bad shapes, dtypes,
// devices, files): it throws ember::Error with a message that names the op and
// the offending values. EMBER_ASSERT guards our own invariants. The library
// never calls exit() or abort().
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ember {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] void throw_error(std::string message);
[[noreturn]] void throw_internal(const char* condition, const char* file, int line, std::string message);
}  // namespace detail

}  // namespace ember

#define EMBER_CHECK(condition, ...)                                  \
  do {                                                               \
    if (!(condition)) [[unlikely]]                                   \
      ::ember::detail::throw_error(::fmt::format(__VA_ARGS__));      \
  } while (0)

#define EMBER_ASSERT(condition, ...)                                                        \
  do {                                                                                      \
    if (!(condition)) [[unlikely]]                                                          \
      ::ember::detail::throw_internal(#condition, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)
