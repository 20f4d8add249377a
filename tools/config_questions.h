// The questions `ember config` asks on a terminal, one at a time with the
// default in brackets, as `accelerate config` does: the kind of machine, how
// many machines and processes, mixed precision, gradient accumulation, and
// (when wanted) ember's own Accelerator options. A bad answer is explained and
// asked again. tools/config_command.cpp calls it with std::cin and std::cout.
// Tests: tests/tools/test_config_command.cpp (through a pseudo-terminal).
#pragma once

#include <iosfwd>

#include "config_keys.h"

namespace ember::launch {

// The answers as settings for config_file.h. Throws ember::Error when the
// input ends before the last answer.
Settings ask_config_questions(std::istream& in, std::ostream& out);

}  // namespace ember::launch
