// The expression lexer: C's tokens for the operators attnc's expressions have, and numbers that
// must not run into a name ("2k" is one malformed token, not 2 and k).
#include "compiler/Spec/ExprLexer.h"

#include "llvm/ADT/StringExtras.h"

namespace attnc::expr::detail {

Token Lexer::next() {
  while (pos < text.size() && llvm::isSpace(text[pos])) ++pos;
  Token tok;
  tok.offset = pos;
  if (pos >= text.size()) {
    tok.kind = Tok::End;
    return tok;
  }
  char c = text[pos];
  if (llvm::isAlpha(c) || c == '_') {
    size_t end = pos;
    while (end < text.size() && (llvm::isAlnum(text[end]) || text[end] == '_')) ++end;
    return take(Tok::Ident, end);
  }
  if (llvm::isDigit(c) || (c == '.' && pos + 1 < text.size() && llvm::isDigit(text[pos + 1])))
    return lexNumber();
  static constexpr llvm::StringLiteral twoChar[] = {"<=", ">=", "==", "!=", "&&", "||"};
  for (llvm::StringRef op : twoChar)
    if (text.substr(pos).starts_with(op)) return take(Tok::Punct, pos + 2);
  if (llvm::StringRef("+-*/%<>!()[],").contains(c)) return take(Tok::Punct, pos + 1);
  return take(Tok::Error, pos + 1);
}

Token Lexer::take(Tok kind, size_t end) {
  Token tok{kind, text.slice(pos, end), pos};
  pos = end;
  return tok;
}

Token Lexer::lexNumber() {
  size_t end = pos;
  bool isFloat = false;
  while (end < text.size() && llvm::isDigit(text[end])) ++end;
  if (end < text.size() && text[end] == '.') {
    isFloat = true;
    ++end;
    while (end < text.size() && llvm::isDigit(text[end])) ++end;
  }
  if (end < text.size() && (text[end] == 'e' || text[end] == 'E')) {
    isFloat = true;
    ++end;
    if (end < text.size() && (text[end] == '+' || text[end] == '-')) ++end;
    if (end >= text.size() || !llvm::isDigit(text[end])) return malformed(end);
    while (end < text.size() && llvm::isDigit(text[end])) ++end;
  }
  // "2k" or "1.5.2" is a typo, not a number followed by a name.
  if (end < text.size() && (llvm::isAlnum(text[end]) || text[end] == '_' || text[end] == '.'))
    return malformed(end);
  return take(isFloat ? Tok::Float : Tok::Int, end);
}

Token Lexer::malformed(size_t end) {
  while (end < text.size() && (llvm::isAlnum(text[end]) || text[end] == '_' || text[end] == '.'))
    ++end;
  return take(Tok::Error, end);
}

llvm::StringRef text;

}  // namespace attnc::expr::detail
