// Out-of-line throwing keeps EMBER_CHECK cheap at every call site.
#include "core/error.h"
#include "core/shown_text.h"

namespace ember {
namespace {

// The length of the well-formed UTF-8 sequence starting `text` (1 to 4), or 0.
size_t utf8_length(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const auto continuation = [&](size_t i) { return i < text.size() && (byte(i) & 0xC0) == 0x80; };
  const unsigned char first = byte(0);
  if (first < 0x80) return 1;
  if (first >= 0xC2 && first <= 0xDF) return continuation(1) ? 2 : 0;
  if (first >= 0xE0 && first <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (first == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
    if (first == 0xED && byte(1) >= 0xA0) return 0;  // a surrogate
    return 3;
  }
  if (first >= 0xF0 && first <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (first == 0xF0 && byte(1) < 0x90) return 0;  // overlong
    if (first == 0xF4 && byte(1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::string shown_text(std::string_view text, size_t length) {
  const std::string_view cut = text.substr(0, length);
  std::string shown;
  shown.reserve(cut.size());
  for (size_t i = 0; i < cut.size();) {
    const unsigned char c = static_cast<unsigned char>(cut[i]);
    const size_t sequence = utf8_length(cut.substr(i));
    if (sequence == 1 && c >= 0x20 && c != 0x7F) {
      shown += char(c);
    } else if (sequence == 1) {
      switch (c) {
        case '\0': shown += "\\0"; break;
        case '\n': shown += "\\n"; break;
        case '\r': shown += "\\r"; break;
        case '\t': shown += "\\t"; break;
        default: shown += fmt::format("\\x{:02x}", c);
      }
    } else if (sequence == 2 && c == 0xC2 && static_cast<unsigned char>(cut[i + 1]) < 0xA0) {
      shown += fmt::format("\\u{:04x}", static_cast<unsigned char>(cut[i + 1]));  // a C1 control: U+0080 + (byte - 0x80)
    } else if (sequence > 1) {
      shown.append(cut.substr(i, sequence));
    } else {
      shown += fmt::format("\\x{:02x}", c);  // not UTF-8 (or a sequence the cut split)
    }
    i += sequence == 0 ? 1 : sequence;
  }
  if (text.size() <= length) return shown;
  return fmt::format("{}... ({} bytes)", shown, text.size());
}

}  // namespace ember

namespace ember::detail {

void throw_error(std::string message) { throw Error(std::move(message)); }

void throw_internal(const char* condition, const char* file, int line, std::string message) {
  throw Error(fmt::format("internal error: {} ({} failed at {}:{}); please report this as a bug",
                          message, condition, file, line));
}

}  // namespace ember::detail
