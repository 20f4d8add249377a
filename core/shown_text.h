// Text read from a file, as an error message shows it. Every name from a file
// (a tensor name, a manifest entry, a config or JSON key) goes through
// shown_text before it reaches a message (Note [Paths ember opens] in
// core/README.md). Defined in core/error.cpp. Tests: tests/core/test_file_io.cpp.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ember {

// `text` cut to `length` bytes, with every byte that could cut the message or
// drive the terminal escaped: NUL as `\0` (what() is a C string), other
// control characters and DEL as `\n`, `\t`, `\x1b`, ..., C1 controls
// (U+0080..U+009F) as `\u0080`..., and bytes that are not UTF-8 as `\xNN`.
std::string shown_text(std::string_view text, size_t length = 80);

}  // namespace ember
