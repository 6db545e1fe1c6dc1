// Text files compiled into the binary: the device templates under templates/ and any header the
// code generator hands to NVRTC by name. Declared here; defined by the source that
// cmake/EmbedFiles.cmake generates at build time (target attncEmbeddedTemplates), so this header
// has no .cpp of its own.
#pragma once

#include <string>
#include <vector>

namespace attnc {

struct EmbeddedFile {
  std::string path;      // as the file is #included, e.g. "attnc/sm80/forward.h"
  std::string contents;  // the bytes of the file, unchanged
};

// Every file under templates/, keyed by its path relative to templates/, sorted by path.
// Defined in a source generated at build time (target attncEmbeddedTemplates).
const std::vector<EmbeddedFile>& embeddedTemplates();

}  // namespace attnc
