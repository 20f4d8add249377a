// JSON from files that may be damaged or hostile (checkpoint manifests,
// sharded-model indexes): parsed whole, but refusing what nlohmann's parser
// lets through silently, a key repeated in one object (nlohmann keeps the
// last, so a file could name one tensor twice and be read as naming it once).
// Callers bound the text's size first (read_small_file). Tests: through the
// callers (tests/distributed/test_checkpoint_files.cpp, tests/nn/test_serialize_sharded.cpp).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/shown_text.h"  // for the callers' messages

namespace ember {

// The parsed text; an ember::Error starting with `context` for invalid JSON
// or a repeated key.
nlohmann::json parse_json_strictly(const std::string& text, std::string_view context);

}  // namespace ember
