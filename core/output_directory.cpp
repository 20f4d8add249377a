#include "core/output_directory.h"

#include <unistd.h>

#include "core/error.h"
#include "core/file_io.h"

namespace ember {

void prepare_output_directory(std::string_view op, const std::filesystem::path& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  EMBER_CHECK(!error, "{}: cannot create the directory '{}': {}", op, directory.string(), error.message());
  EMBER_CHECK(std::filesystem::is_directory(directory, error), "{}: '{}' is not a directory", op, directory.string());
  EMBER_CHECK(access(directory.c_str(), W_OK | X_OK) == 0, "{}: the directory '{}' cannot be written: {}", op,
              directory.string(), errno_text());
}

}  // namespace ember
