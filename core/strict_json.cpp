// Strict JSON parsing (core/strict_json.h).
#include "core/strict_json.h"

#include <set>
#include <vector>

#include "core/error.h"

namespace ember {

namespace {
constexpr size_t kShownErrorLength = 300;  // a parse error quotes the text it stopped at, which may be long
}  // namespace

nlohmann::json parse_json_strictly(const std::string& text, std::string_view context) {
  using Json = nlohmann::json;
  std::vector<std::set<std::string>> open_objects;  // the keys seen in each object being parsed
  auto callback = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == Json::parse_event_t::object_end) open_objects.pop_back();
    if (event == Json::parse_event_t::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      EMBER_CHECK(open_objects.back().insert(key).second, "{}: the key '{}' appears twice in one object", context,
                  shown_text(key));
    }
    return true;
  };
  // nlohmann's lexer ends the text at a NUL byte, so what followed one was
  // never read ("{\"a\":1}\0junk" parsed as {"a":1}): a damaged file passed.
  const size_t nul = text.find('\0');
  EMBER_CHECK(nul == std::string::npos, "{}: not valid JSON: a NUL byte at offset {}", context, nul);
  try {
    return Json::parse(text, callback);
  } catch (const Json::exception& error) {
    ::ember::detail::throw_error(fmt::format("{}: not valid JSON: {}", context, shown_text(error.what(), kShownErrorLength)));
  }
}

}  // namespace ember
