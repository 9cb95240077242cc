// Tokenizer for FX readable text (the restricted Python that `print_readable()` writes).
//
// Produces logical lines: a physical line, or several joined while brackets are open or
// after a trailing backslash. Comment-only lines are kept (the importer reads
// `# File: ...` comments as source locations). The lexer never throws: problems
// (unterminated strings, stray characters, end of file inside brackets) are recorded on
// the line and reported only if the importer interprets that line, so text after the
// graph (e.g. a `str(graph)` dump appended to the file) cannot fail the import.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fxfuse::ir::fxtext {

enum class TK : uint8_t { Name, Number, Str, Op, Bad };

struct Tok {
  uint32_t off = 0, len = 0;  // into the text
  TK k = TK::Bad;
};

struct LogicalLine {
  int indent = 0;           // columns (tabs to multiples of 8)
  int lineno = 0;           // first physical line, 1-based
  bool comment = false;     // comment-only line; `text` is what follows '#'
  std::string_view text;    // raw text of the logical line (or the comment)
  uint32_t tb = 0, te = 0;  // token range in Lexer::tokens()
  std::string problem;      // lexing problem, empty when none
};

class Lexer {
 public:
  // Lexes `text` starting at byte `pos`, which begins physical line `lineno`.
  Lexer(std::string_view text, size_t pos, int lineno) : text_(text), pos_(pos), line_(lineno) {
    toks_.reserve((text.size() - std::min(pos, text.size())) / 4 + 16);  // ~1 token per 5 bytes in FX dumps
  }

  // The next non-blank logical line; false at the end of the text.
  bool next(LogicalLine& out);
  // Indentation of the next line that holds code (not blank, not a comment), or -1 at
  // the end of the text. Does not consume anything.
  int peekCodeIndent() const;

  const std::vector<Tok>& tokens() const { return toks_; }
  std::string_view text(const Tok& t) const { return text_.substr(t.off, t.len); }
  std::string_view source() const { return text_; }

 private:
  std::string_view text_;
  size_t pos_;
  int line_;
  std::vector<Tok> toks_;
};

// Decodes a Python string literal token (with its quotes). False if malformed.
bool decodeStringLiteral(std::string_view tok, std::string& out);

// Visual width of leading whitespace (tab stops every 8 columns).
int indentWidth(std::string_view line, size_t* first_non_ws = nullptr);

}  // namespace fxfuse::ir::fxtext
