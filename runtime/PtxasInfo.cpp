// ptxas' "-v" report, as NVRTC puts it into the program log, read per entry function
// (PtxasInfo.h).
#include "runtime/PtxasInfo.h"

#include <cstdio>
#include <cstring>
#include <vector>

namespace attnc {

namespace {

bool startsWith(const std::string& text, size_t at, const char* prefix) {
  return text.compare(at, std::strlen(prefix), prefix) == 0;
}

std::string trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos)
    return "";
  size_t end = text.find_last_not_of(" \t\r");
  return text.substr(begin, end - begin + 1);
}

// The comma-separated items after "ptxas info    :" or "ptxas         .".
std::vector<std::string> ptxasItems(const std::string& line) {
  std::vector<std::string> items;
  size_t marker = line.find_first_of(":.", 5);
  if (marker == std::string::npos)
    return items;
  std::string rest = line.substr(marker + 1);
  size_t begin = 0;
  while (begin <= rest.size()) {
    size_t comma = rest.find(',', begin);
    if (comma == std::string::npos)
      comma = rest.size();
    items.push_back(trim(rest.substr(begin, comma - begin)));
    begin = comma + 1;
  }
  return items;
}

// "'name'" -> name, from the first quote on.
std::string quoted(const std::string& line, size_t from) {
  size_t open = line.find('\'', from);
  if (open == std::string::npos)
    return "";
  size_t close = line.find('\'', open + 1);
  return close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

}  // namespace

// ptxas -v prints, per entry function (NVRTC 13.0, sm_80 and sm_90a alike):
//   ptxas info    : Compiling entry function 'fwd' for 'sm_90a'
//   ptxas info    : Function properties for fwd
//   ptxas         .     1152 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 40 registers, used 1 barriers, 1152 bytes cumulative stack size,
//                   4096 bytes smem, 364 bytes cmem[0]          (one line; items may be absent)
// and "Function properties for" blocks for non-inlined device functions, which are not entries.
// Where ptxas serializes an entry's wgmma instructions it says so, before the entry's own lines:
//   ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized
//                   due to insufficient register resources for the wgmma pipeline in the function
//                   'fwd'                                        (one line)
std::map<std::string, ResourceUsage> parsePtxasInfo(const std::string& log) {
  std::map<std::string, ResourceUsage> entries;
  std::map<std::string, ResourceUsage> frames;  // stack/spill lines, per function of any kind
  std::map<std::string, std::string> serialized;  // the wgmma notes, per function
  std::string currentEntry;
  std::string propertiesOf;

  size_t lineBegin = 0;
  while (lineBegin < log.size()) {
    size_t lineEnd = log.find('\n', lineBegin);
    if (lineEnd == std::string::npos)
      lineEnd = log.size();
    std::string line = log.substr(lineBegin, lineEnd - lineBegin);
    lineBegin = lineEnd + 1;
    if (!startsWith(line, 0, "ptxas"))
      continue;

    if (size_t at = line.find("wgmma.mma_async instructions are serialized");
        at != std::string::npos) {
      const size_t in = line.find("in the function", at);
      const size_t code = line.rfind("(C", at);
      serialized[in == std::string::npos ? currentEntry : quoted(line, in)] =
          trim(line.substr(code == std::string::npos ? at : code));
      continue;
    }
    if (size_t at = line.find("Compiling entry function"); at != std::string::npos) {
      currentEntry = quoted(line, at);
      entries[currentEntry];
      continue;
    }
    if (line.find(": Compiling ") != std::string::npos) {  // any other unit: not an entry
      currentEntry.clear();
      continue;
    }
    if (size_t at = line.find("Function properties for "); at != std::string::npos) {
      propertiesOf = trim(line.substr(at + std::strlen("Function properties for ")));
      continue;
    }
    if (line.find("bytes stack frame") != std::string::npos) {
      ResourceUsage& frame = frames[propertiesOf];
      for (const std::string& item : ptxasItems(line)) {
        int value = 0;
        if (std::sscanf(item.c_str(), "%d bytes stack frame", &value) == 1 &&
            item.find("stack frame") != std::string::npos)
          frame.stackBytes = value;
        else if (std::sscanf(item.c_str(), "%d bytes spill stores", &value) == 1 &&
                 item.find("spill stores") != std::string::npos)
          frame.spillStoreBytes = value;
        else if (std::sscanf(item.c_str(), "%d bytes spill loads", &value) == 1 &&
                 item.find("spill loads") != std::string::npos)
          frame.spillLoadBytes = value;
      }
      continue;
    }
    if (line.find(": Used ") != std::string::npos && !currentEntry.empty()) {
      ResourceUsage& usage = entries[currentEntry];
      for (const std::string& item : ptxasItems(line)) {
        int value = 0;
        int bank = 0;
        if (std::sscanf(item.c_str(), "Used %d registers", &value) == 1)
          usage.registers = value;
        else if (std::sscanf(item.c_str(), "used %d barriers", &value) == 1)
          usage.barriers = value;
        else if (std::sscanf(item.c_str(), "%d bytes cmem[%d]", &value, &bank) == 2)
          usage.constantBytes += value;
        else if (std::sscanf(item.c_str(), "%d bytes smem", &value) == 1 &&
                 item.find("smem") != std::string::npos)
          usage.staticSharedBytes = value;
      }
      continue;
    }
  }

  for (auto& [name, usage] : entries) {
    if (auto note = serialized.find(name); note != serialized.end())
      usage.wgmmaSerialized = note->second;
    auto frame = frames.find(name);
    if (frame == frames.end())
      continue;
    usage.stackBytes = frame->second.stackBytes;
    usage.spillStoreBytes = frame->second.spillStoreBytes;
    usage.spillLoadBytes = frame->second.spillLoadBytes;
  }
  return entries;
}

}  // namespace attnc
