// The headers nearly every test file parses, compiled once per test
// executable (target_precompile_headers in tests/CMakeLists.txt). Parsing
// them took about 3 s of a test file's 7 to 9 s; with 150 test files that
// was minutes of CI's cold build. Every file still includes what it uses:
// this list changes build time only, never what compiles.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <ember/ember.h>
#include <nlohmann/json.hpp>
