// Reads a YAML spec into a Spec: the file (bounded in size, never blocking on a FIFO), then the
// YAML checked for syntax and nesting before SpecReader walks it, so that LLVM's recursive parser
// never sees a document deep enough to overflow the stack.
#include "compiler/Spec/Limits.h"
#include "compiler/Spec/Spec.h"
#include "compiler/Spec/SpecReader.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace attnc {

namespace yaml = llvm::yaml;
using detail::Place;
using detail::SourceText;
using detail::SpecReader;

namespace {

// Spaces before a line's first character.
size_t indentOf(llvm::StringRef line) {
  return std::min(line.find_first_not_of(' '), line.size());
}

// LLVM's scanner reports a field indented off its mapping's column as "Unexpected token. Expected
// Key or Block End" at the field's colon; said in terms of indentation instead.
std::optional<std::string> explainIndentation(const SourceText& source, const Place& place) {
  if (place.loc.line < 2) return std::nullopt;
  llvm::StringRef line(place.sourceLine);
  const size_t indent = indentOf(line);
  if (indent == line.size()) return std::nullopt;
  // The nearest line above with content: the field this one should line up with, or its parent.
  llvm::SmallVector<llvm::StringRef> lines;
  source.text.split(lines, '\n');
  for (size_t above = place.loc.line - 1; above-- > 0;) {
    if (above >= lines.size()) return std::nullopt;
    llvm::StringRef previous = lines[above].rtrim("\r");
    const size_t previousIndent = indentOf(previous);
    if (previousIndent == previous.size() || previous[previousIndent] == '#') continue;
    if (previousIndent == indent) return std::nullopt;  // lined up: not an indentation problem
    const std::string key = line.substr(indent).split(':').first.rtrim().str();
    const auto spaces = [](size_t n) {
      return std::to_string(n) + (n == 1 ? " space" : " spaces");
    };
    std::string message = "invalid YAML: bad indentation: '" + key + "' is indented " +
                          spaces(indent) + " but the line above " + spaces(previousIndent);
    if (indent > previousIndent)
      message += "; only a key with no value on its line (`key:`) opens a more indented mapping";
    else
      message += "; a field lines up with the fields of its mapping";
    return message;
  }
  return std::nullopt;
}

// LLVM's YAML scanner reports syntax errors through the SourceMgr; this collects them as ours
// instead of letting them reach stderr.
struct YamlErrorSink {
  const SourceText* source;
  Diagnostics diags;

  static void handle(const llvm::SMDiagnostic& smDiag, void* context) {
    auto* sink = static_cast<YamlErrorSink*>(context);
    const char* ptr = smDiag.getLoc().getPointer();
    Place place;
    if (sink->source->contains(ptr)) {
      place = sink->source->place(ptr);
    } else {
      place.loc = SourceLoc{sink->source->fileName.str(), unsigned(std::max(smDiag.getLineNo(), 1)),
                            unsigned(smDiag.getColumnNo() + 1)};
      place.sourceLine = smDiag.getLineContents().str();
    }
    std::string message = "invalid YAML: " + smDiag.getMessage().str();
    std::optional<std::string> indentation;
    if (smDiag.getMessage().contains("Expected Key or Block End"))
      indentation = explainIndentation(*sink->source, place);
    if (indentation) {
      message = *indentation;
      place.loc.col = unsigned(llvm::StringRef(place.sourceLine).find_first_not_of(' ') + 1);
    }
    // `mask: !(k > q)` is the likeliest way to hit this: YAML reads the '!' as a tag.
    llvm::StringRef line(place.sourceLine);
    size_t bang = line.find(": !");
    if (bang != llvm::StringRef::npos && !line.substr(bang + 3).starts_with("!"))
      message +=
          " (a value starting with '!' is a YAML tag: quote the expression, e.g. \"!(k > q)\")";
    sink->diags.push_back(Diagnostic{place.loc, message, place.sourceLine, ""});
  }
};

// A conservative bound on the nesting of YAML text, found without parsing it: on each line, the
// indentation levels open above it plus the block indicators (`- `, `? `, `: `) that open a
// collection on the line itself, plus the flow brackets open at each '[' or '{' (counted inside
// quotes too: that only makes the bound stricter). Returns where the bound first exceeds
// kMaxYamlNesting, or null.
const char* findDeepNesting(llvm::StringRef text) {
  std::vector<size_t> indents;  // columns of the open indentation levels
  unsigned flow = 0;
  size_t lineStart = 0;
  while (lineStart < text.size()) {
    size_t lineEnd = text.find('\n', lineStart);
    if (lineEnd == llvm::StringRef::npos) lineEnd = text.size();
    llvm::StringRef line = text.slice(lineStart, lineEnd);
    size_t indent = line.find_first_not_of(' ');
    bool blank = indent == llvm::StringRef::npos || line.substr(indent).ltrim(" \t\r").empty() ||
                 line[indent] == '#';
    unsigned depth = unsigned(indents.size());
    if (!blank && flow == 0) {
      while (!indents.empty() && indents.back() > indent) indents.pop_back();
      if (indents.empty() || indents.back() < indent) indents.push_back(indent);
      depth = unsigned(indents.size());
      // `- - - x` and `? ? ? x` open one collection per indicator.
      size_t pos = indent;
      while (pos < line.size() && llvm::StringRef("-?:").contains(line[pos]) &&
             (pos + 1 == line.size() || llvm::StringRef(" \t\r").contains(line[pos + 1]))) {
        if (++depth > limits::kMaxYamlNesting) return line.data() + pos;
        pos = line.find_first_not_of(" \t\r", pos + 1);
        if (pos == llvm::StringRef::npos) break;
      }
      // `key: ? ? ? x`: a complex key opens a mapping wherever it stands (and `?` has no other
      // use in a spec: expressions write conditionals with where()).
      for (; pos < line.size(); ++pos)
        if (line[pos] == '?' && pos > 0 && llvm::StringRef(" \t").contains(line[pos - 1]) &&
            (pos + 1 == line.size() || llvm::StringRef(" \t\r").contains(line[pos + 1])) &&
            ++depth > limits::kMaxYamlNesting)
          return line.data() + pos;
    }
    if (depth > limits::kMaxYamlNesting) return line.data() + (blank ? 0 : indent);
    for (const char& c : line) {
      if (c == '[' || c == '{') {
        if (depth + ++flow > limits::kMaxYamlNesting) return &c;
      } else if ((c == ']' || c == '}') && flow > 0) {
        --flow;
      }
    }
    lineStart = lineEnd + 1;
  }
  return nullptr;
}

// Parses the whole of `node` (llvm::yaml parses lazily, as nodes are visited), descending no
// deeper than kMaxYamlNesting: returns false with `deep` set to the first node past it. Aliases
// are not followed, so an alias bomb costs its text's length.
bool walkBounded(yaml::Node* node, unsigned depth, yaml::Node*& deep) {
  if (!node) return true;
  if (depth > limits::kMaxYamlNesting) {
    deep = node;
    return false;
  }
  if (auto* mapping = llvm::dyn_cast<yaml::MappingNode>(node)) {
    for (yaml::KeyValueNode& entry : *mapping)
      if (!walkBounded(entry.getKey(), depth + 1, deep) ||
          !walkBounded(entry.getValue(), depth + 1, deep))
        return false;
  } else if (auto* sequence = llvm::dyn_cast<yaml::SequenceNode>(node)) {
    for (yaml::Node& item : *sequence)
      if (!walkBounded(&item, depth + 1, deep)) return false;
  }
  return true;
}

}  // namespace

std::optional<Spec> parseSpecText(llvm::StringRef text, llvm::StringRef fileName,
                                  Diagnostics& diags) {
  SourceText source(text, fileName);
  if (text.size() > limits::kMaxSpecBytes) {
    // Reported where the text crosses the limit.
    Place place = source.place(text.data() + limits::kMaxSpecBytes);
    diags.push_back(Diagnostic{place.loc,
                               "spec is larger than " + std::to_string(limits::kMaxSpecBytes) +
                                   " bytes; this is not a spec file",
                               place.sourceLine, ""});
    return std::nullopt;
  }
  auto tooDeep = [&](const char* at) {
    Place place = source.place(at);
    diags.push_back(Diagnostic{place.loc,
                               "invalid YAML: nested more than " +
                                   std::to_string(limits::kMaxYamlNesting) + " levels deep",
                               place.sourceLine, ""});
    return std::nullopt;
  };
  // LLVM's YAML parser recurses once per nesting level, so absurd nesting would overflow the stack
  // instead of failing: reject it before the parser sees it.
  if (const char* at = findDeepNesting(text)) return tooDeep(at);
  // First pass: syntax and nesting only. The node walk below runs on a document known to be
  // well-formed and shallow, so it never sees the partial nodes LLVM builds after a syntax error.
  {
    YamlErrorSink sink{&source, {}};
    llvm::SourceMgr sourceMgr;
    sourceMgr.setDiagHandler(&YamlErrorSink::handle, &sink);
    yaml::Stream stream(text, sourceMgr, /*ShowColors=*/false);
    for (auto document = stream.begin(); document != stream.end(); ++document) {
      yaml::Node* deep = nullptr;
      if (!walkBounded(document->getRoot(), 1, deep) && deep && sink.diags.empty())
        return tooDeep(deep->getSourceRange().Start.getPointer());
      if (deep || !sink.diags.empty()) break;
    }
    if (!sink.diags.empty() || stream.failed()) {
      if (sink.diags.empty())
        sink.diags.push_back(Diagnostic{SourceLoc{fileName.str(), 1, 1}, "invalid YAML", "", ""});
      // One syntax error usually causes the rest; the first is the one to fix.
      diags.push_back(sink.diags.front());
      return std::nullopt;
    }
  }

  llvm::SourceMgr sourceMgr;
  YamlErrorSink sink{&source, {}};
  sourceMgr.setDiagHandler(&YamlErrorSink::handle, &sink);
  yaml::Stream stream(text, sourceMgr, /*ShowColors=*/false);
  Diagnostics found;
  SpecReader reader(source, found);
  std::optional<Spec> spec = reader.read(stream);
  found.insert(found.end(), sink.diags.begin(), sink.diags.end());
  sortByPosition(found);
  diags.insert(diags.end(), found.begin(), found.end());
  if (hasErrors(found)) return std::nullopt;
  return spec;
}

std::optional<Spec> parseSpecFile(llvm::StringRef path, Diagnostics& diags) {
  auto fail = [&](const std::string& message) {
    diags.push_back(Diagnostic{SourceLoc{path.str(), 0, 0}, message, "", ""});
    return std::nullopt;
  };
  // Non-blocking, so that opening a FIFO nobody writes to returns at once instead of hanging.
  int fd = ::open(path.str().c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fail("cannot read spec file: " + std::string(std::strerror(errno)));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat info;
  if (::fstat(fd, &info) != 0)
    return fail("cannot read spec file: " + std::string(std::strerror(errno)));
  if (S_ISDIR(info.st_mode)) return fail("cannot read spec file: it is a directory");
  // A pipe (`<(...)`, a FIFO) is read to its end; devices such as /dev/zero never end.
  if (!S_ISREG(info.st_mode) && !S_ISFIFO(info.st_mode))
    return fail("cannot read spec file: not a regular file or a pipe");
  if (S_ISFIFO(info.st_mode)) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  // At most one byte past the limit: enough to tell a file that is larger (or a pipe that never
  // ends) without reading it whole; parseSpecText reports such a text where it crosses the limit.
  std::string text(S_ISREG(info.st_mode)
                       ? std::min<size_t>(uint64_t(info.st_size), limits::kMaxSpecBytes) + 1
                       : size_t(4096),
                   '\0');
  size_t size = 0;
  while (true) {
    if (size == text.size()) {
      if (size > limits::kMaxSpecBytes) break;
      text.resize(std::min(2 * size, limits::kMaxSpecBytes + 1));
    }
    ssize_t got = ::read(fd, &text[size], text.size() - size);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return fail("cannot read spec file: " + std::string(std::strerror(errno)));
    if (got == 0) break;
    size += size_t(got);
  }
  text.resize(size);
  return parseSpecText(text, path, diags);
}

}  // namespace attnc