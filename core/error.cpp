// Out-of-line throwing keeps EMBER_CHECK cheap at every call site.
#include "core/error.h"

namespace ember::detail {

void throw_error(std::string message) { throw Error(std::move(message)); }

void throw_internal(const char* condition, const char* file, int line, std::string message) {
  throw Error(fmt::format("internal error: {} ({} failed at {}:{}); please report this as a bug",
                          message, condition, file, line));
}

}  // namespace ember::detail
