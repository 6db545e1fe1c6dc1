// The tokens of a mask or score expression: integers, floats, identifiers, punctuation, and a
// token for text that is none of them (reported by the parser, which knows what it expected).
#pragma once

#include "llvm/ADT/StringRef.h"

#include <cstddef>

namespace attnc::expr::detail {

enum class Tok { Int, Float, Ident, Punct, End, Error };

struct Token {
  Tok kind = Tok::End;
  llvm::StringRef text;
  size_t offset = 0;
};

class Lexer {
public:
  explicit Lexer(llvm::StringRef text) : text(text) {}

  // The next token; at the end of the text, Tok::End (again on every later call).
  Token next();

private:
  Token take(Tok kind, size_t end);
  Token lexNumber();
  Token malformed(size_t end);

  llvm::StringRef text;
  size_t pos = 0;
};

}  // namespace attnc::expr::detail
