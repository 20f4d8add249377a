// A directory a job will write into at its end (a profile, a trace), checked
// at its start: made when missing, and an ember::Error naming `op` and the
// path when it is not a directory or cannot be written, so that a long run
// does not learn at exit that its output had nowhere to go.
#pragma once

#include <filesystem>
#include <string_view>

namespace ember {

void prepare_output_directory(std::string_view op, const std::filesystem::path& directory);

}  // namespace ember
