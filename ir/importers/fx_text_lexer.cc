#include "ir/importers/fx_text_lexer.h"

#include <cctype>
#include <cstdio>

namespace fxfuse::ir::fxtext {

namespace {

bool isNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool isNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

const char* const kOps3[] = {"..."};
const char* const kOps2[] = {"**", "//", "==", "!=", "<=", ">=", "->", "<<", ">>"};
const char kOps1[] = "()[]{},:;.=+-*/%<>&|^~@";

}  // namespace

int indentWidth(std::string_view line, size_t* first_non_ws) {
  int w = 0;
  size_t i = 0;
  for (; i < line.size(); ++i) {
    char c = line[i];
    if (c == ' ') {
      ++w;
    } else if (c == '\t') {
      w = (w / 8 + 1) * 8;
    } else if (c == '\f') {
      w = 0;
    } else {
      break;
    }
    if (w > (1 << 20)) w = 1 << 20;
  }
  if (first_non_ws) *first_non_ws = i;
  return w;
}

int Lexer::peekCodeIndent() const {
  size_t p = pos_;
  while (p < text_.size()) {
    size_t eol = text_.find('\n', p);
    if (eol == std::string_view::npos) eol = text_.size();
    std::string_view line = text_.substr(p, eol - p);
    size_t a = 0;
    int w = indentWidth(line, &a);
    while (a < line.size() && (line[a] == '\r' || line[a] == ' ' || line[a] == '\t')) ++a;
    if (a < line.size() && line[a] != '#') return w;
    p = eol + 1;
  }
  return -1;
}

bool Lexer::next(LogicalLine& out) {
  const size_t n = text_.size();
  while (pos_ < n) {
    size_t eol = text_.find('\n', pos_);
    if (eol == std::string_view::npos) eol = n;
    std::string_view phys = text_.substr(pos_, eol - pos_);
    size_t a = 0;
    int indent = indentWidth(phys, &a);
    size_t b = phys.size();
    while (b > a && (phys[b - 1] == '\r' || phys[b - 1] == ' ' || phys[b - 1] == '\t')) --b;
    if (a >= b) {  // blank line
      pos_ = eol + 1;
      ++line_;
      continue;
    }
    out = LogicalLine{};
    out.indent = indent;
    out.lineno = line_;
    if (phys[a] == '#') {
      out.comment = true;
      out.text = phys.substr(a + 1, b - a - 1);
      pos_ = eol + 1;
      ++line_;
      return true;
    }
    // Code: tokenize until a newline outside brackets.
    out.tb = static_cast<uint32_t>(toks_.size());
    size_t p = pos_ + a;
    const size_t start = p;
    int depth = 0;
    int open_line = line_;
    auto bad = [&](const std::string& what) {
      if (out.problem.empty()) out.problem = what;
    };
    auto push = [&](size_t off, size_t len, TK k) {
      toks_.push_back(Tok{static_cast<uint32_t>(off), static_cast<uint32_t>(len), k});
    };
    while (p < n) {
      char c = text_[p];
      if (c == '\n') {
        if (depth > 0) {
          ++line_;
          ++p;
          continue;
        }
        break;
      }
      if (c == ' ' || c == '\t' || c == '\r' || c == '\f') {
        ++p;
        continue;
      }
      if (c == '#') {
        while (p < n && text_[p] != '\n') ++p;
        continue;
      }
      if (c == '\\') {
        size_t q = p + 1;
        if (q < n && text_[q] == '\r') ++q;
        if (q < n && text_[q] == '\n') {
          ++line_;
          p = q + 1;
          continue;
        }
        bad("stray '\\'");
        push(p, 1, TK::Bad);
        ++p;
        continue;
      }
      if (isNameStart(c)) {
        size_t s = p;
        while (p < n && isNameChar(text_[p])) ++p;
        // String prefixes (r'', b'', u'', f'') are not written by FX; lex them as strings.
        if (p < n && (text_[p] == '\'' || text_[p] == '"') && p - s <= 2) {
          bad("string prefixes are not supported");
        }
        push(s, p - s, TK::Name);
        continue;
      }
      if (isDigit(c) || (c == '.' && p + 1 < n && isDigit(text_[p + 1]))) {
        size_t s = p;
        while (p < n) {
          char d = text_[p];
          if (isNameChar(d) || d == '.') {
            ++p;
          } else if ((d == '+' || d == '-') && (text_[p - 1] == 'e' || text_[p - 1] == 'E') &&
                     !(p - s >= 2 && (text_[s + 1] == 'x' || text_[s + 1] == 'X'))) {
            ++p;
          } else {
            break;
          }
        }
        push(s, p - s, TK::Number);
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t s = p++;
        bool closed = false;
        while (p < n && text_[p] != '\n') {
          if (text_[p] == '\\' && p + 1 < n && text_[p + 1] != '\n') {
            p += 2;
            continue;
          }
          if (text_[p] == c) {
            ++p;
            closed = true;
            break;
          }
          ++p;
        }
        if (!closed) {
          bad("unterminated string");
          push(s, p - s, TK::Bad);
        } else {
          push(s, p - s, TK::Str);
        }
        continue;
      }
      bool matched = false;
      for (const char* op : kOps3) {
        if (text_.substr(p, 3) == op) {
          push(p, 3, TK::Op);
          p += 3;
          matched = true;
          break;
        }
      }
      if (!matched) {
        for (const char* op : kOps2) {
          if (text_.substr(p, 2) == op) {
            push(p, 2, TK::Op);
            p += 2;
            matched = true;
            break;
          }
        }
      }
      if (!matched) {
        for (const char* o = kOps1; *o; ++o) {
          if (c == *o) {
            if (c == '(' || c == '[' || c == '{') {
              if (depth == 0) open_line = line_;
              ++depth;
            } else if (c == ')' || c == ']' || c == '}') {
              if (depth == 0) {
                bad(std::string("unbalanced '") + c + "'");
              } else {
                --depth;
              }
            }
            push(p, 1, TK::Op);
            ++p;
            matched = true;
            break;
          }
        }
      }
      if (!matched) {
        unsigned char uc = static_cast<unsigned char>(c);
        if (uc >= 0x20 && uc < 0x7f) {
          bad(std::string("unexpected character '") + c + "'");
        } else {
          char buf[8];
          std::snprintf(buf, sizeof buf, "0x%02x", uc);
          bad(std::string("unexpected byte ") + buf);
        }
        push(p, 1, TK::Bad);
        ++p;
      }
    }
    if (depth > 0) bad("unexpected end of file inside brackets opened on line " + std::to_string(open_line));
    out.te = static_cast<uint32_t>(toks_.size());
    size_t e = p;
    while (e > start && (text_[e - 1] == '\r' || text_[e - 1] == ' ' || text_[e - 1] == '\t')) --e;
    out.text = text_.substr(start, e - start);
    pos_ = p < n ? p + 1 : n;
    ++line_;
    return true;
  }
  return false;
}

bool decodeStringLiteral(std::string_view tok, std::string& out) {
  out.clear();
  if (tok.size() < 2) return false;
  char q = tok.front();
  if ((q != '\'' && q != '"') || tok.back() != q) return false;
  std::string_view s = tok.substr(1, tok.size() - 2);
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  auto utf8 = [&](uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  };
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i >= s.size()) return false;
    char e = s[i];
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '0': out += '\0'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'x':
      case 'u':
      case 'U': {
        size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (i + len >= s.size()) return false;
        uint32_t cp = 0;
        for (size_t k = 1; k <= len; ++k) {
          int h = hex(s[i + k]);
          if (h < 0) return false;
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (cp > 0x10ffff) return false;
        i += len;
        if (e == 'x') {
          out += static_cast<char>(cp);
        } else {
          utf8(cp);
        }
        break;
      }
      default:
        out += '\\';
        out += e;
    }
  }
  return true;
}

}  // namespace fxfuse::ir::fxtext
