// ir/json_text.h: the one JSON-string escaper of fxfuse's reports.
#include <catch2/catch.hpp>

#include <string>

#include "ir/json_text.h"

using fxfuse::ir::jsonEscaped;
using fxfuse::ir::jsonString;

TEST_CASE("JSON strings escape quotes, backslashes and control characters only", "[ir][json]") {
  CHECK(jsonEscaped("plain name_0") == "plain name_0");
  CHECK(jsonEscaped("a\"b\\c") == "a\\\"b\\\\c");
  CHECK(jsonEscaped(std::string("tab\tnul\0end", 11)) == "tab\\u0009nul\\u0000end");
  CHECK(jsonEscaped("\x1f") == "\\u001f");
  CHECK(jsonEscaped("caf\xc3\xa9") == "caf\xc3\xa9");  // UTF-8 passes through
  CHECK(jsonString("x\"") == "\"x\\\"\"");
  CHECK(jsonString("") == "\"\"");
}
