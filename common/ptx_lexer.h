// A PTX tokeniser just deep enough for reading a module's structure
// (signatures, declarations, call graphs) and for renaming its symbols:
// comments and whitespace are skipped; (),[]{}; are tokens of their own; a
// string ("...") is one token; anything else runs to the next of those.
// Each token's place in the text is kept (`start`), so a caller can rewrite it.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace rgpu::common {

struct PtxLexer {
  const std::string& s;
  size_t i = 0;
  size_t start = 0;  // where the last token() began

  void skipSpace() {
    while (i < s.size()) {
      if (std::isspace(static_cast<unsigned char>(s[i]))) {
        ++i;
      } else if (s.compare(i, 2, "//") == 0) {
        while (i < s.size() && s[i] != '\n') ++i;
      } else if (s.compare(i, 2, "/*") == 0) {
        auto e = s.find("*/", i + 2);
        i = e == std::string::npos ? s.size() : e + 2;
      } else {
        break;
      }
    }
  }
  // The next token; empty at the end of the text.
  std::string token() {
    skipSpace();
    start = i;
    if (i >= s.size()) return {};
    const char c = s[i];
    if (std::string_view("(),[]{};").find(c) != std::string_view::npos) {
      ++i;
    } else if (c == '"') {
      for (++i; i < s.size() && s[i] != '"'; ++i)
        if (s[i] == '\\') ++i;
      i = std::min(i + 1, s.size());
    } else {
      while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i])) &&
             std::string_view("(),[]{};").find(s[i]) == std::string_view::npos)
        ++i;
    }
    return s.substr(start, i - start);
  }
};

}  // namespace rgpu::common
