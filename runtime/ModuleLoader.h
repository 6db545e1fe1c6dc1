// Kernel::Impl: a kernel's compiled forms and, per CUDA context, the modules loaded from the one
// chosen for the device: image choice, module loading, entry lookup, the deferred modules' build,
// and the buffers the launches keep per context and stream.
#pragma once

#include "attnc/attnc.h"
#include "attnc/kernel_names.h"
#include "runtime/Driver.h"
#include "runtime/KernelAccess.h"

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace attnc {

struct Kernel::Impl {
  using Module = ModuleCode;  // a cubin and its PTX
  struct Image {
    KernelMetadata metadata;
    // [0] holds the forward entry (KernelImage, moreModules); the deferred modules are appended
    // once built (a deque: the references cubin(i) and ptx(i) returned stay valid).
    std::deque<Module> modules;
  };
  struct Loaded {
    std::vector<cu::Module> modules;  // Image::modules loaded into one context, in order
    cu::Function function = nullptr;
    cu::Function summary = nullptr;  // the image's summary entry, if it has one
    cu::Function tileClasses = nullptr;  // its tile-classes entry, if it has one
    cu::Function tileOrder = nullptr;    // <tile-classes entry>_order, if it has one
    const Image* image = nullptr;  // the form loaded into this context
    bool usePtx = false;           // loaded from its PTX (else its cubins)
    std::string error;  // why this context cannot run the kernel (kept: the answer will not change)
    // The backward entries (indexed by BackwardEntry), resolved on the first backward launch.
    bool backwardResolved = false;
    cu::Function backward[kBackwardEntries] = {};
    cu::Function backwardTileClasses = nullptr;  // <stem>_tile_classes, with tile classes
    // <stem>_q_tile_classes, with tile classes and an sm_90a _q
    cu::Function backwardQTileClasses = nullptr;
    std::string backwardError;
    // The deterministic mode's entries (kv_nodq, q), resolved on its first launch (they may be in
    // a deferred module, loaded into the context then).
    bool deterministicResolved = false;
    std::string deterministicError;

    cu::Function backwardEntry(BackwardEntry which) const { return backward[int(which)]; }

    // The decode entries, resolved on the first decode launch, with what the split rule needs
    // of this context's device: its SMs and the decode blocks one of them holds.
    bool decodeResolved = false;
    cu::Function decode = nullptr, decodeCombine = nullptr;
    int numSMs = 0, decodeBlocksPerSM = 0;
    // The combine launches with programmatic stream serialization (cuLaunchKernelEx, sm_90 and
    // later, not turned off by ATTNC_DECODE_PDL=0): it starts while the decode grid drains and
    // waits for it with griddepcontrol.wait.
    bool decodeCombineOverlaps = false;
    std::string decodeError;
  };

  // The modules the JIT left for first use (Kernel::compileDeferred): built once, under `mutex`,
  // then appended to the first image's modules under Impl::mutex.
  struct Deferred {
    DeferredBuild build;
    std::mutex mutex;
    std::atomic<bool> done{false};  // also read without the mutex (hasDeferred)
    Status status;
  };
  std::unique_ptr<Deferred> deferred;

  std::vector<Image> images;
  std::mutex mutex;
  std::map<cu::Context, Loaded> loaded;
  // The backward workspace used when the caller passes none: one per context, grow-only.
  std::mutex workspaceMutex;
  std::map<cu::Context, DeviceBuffer> workspaces;
  // The decode's split partials when the caller passes no workspace: one per (context, stream),
  // grow-only, under workspaceMutex (the combine reads them later in the same stream).
  std::map<std::pair<cu::Context, cu::Stream>, DeviceBuffer> decodeWorkspaces;
  // One sequence's [heads_q, q_len] LSE for the launches a packed batch runs a sequence at a time
  // (PerSequenceLaunch.h): per (context, stream), grow-only, under workspaceMutex.
  std::map<std::pair<cu::Context, cu::Stream>, DeviceBuffer> lseScratch;
  // Block-summary buffers, one per (context, stream), grow-only. Per stream because the summary
  // entry writes them and the attention kernels read them later in the same stream: launches on
  // other streams must not overwrite them in between.
  std::mutex summaryMutex;
  std::map<std::pair<cu::Context, cu::Stream>, DeviceBuffer> summaryBuffers;

  ~Impl();

  // `name` from the loaded module that defines it (ModuleSymbols.h; the first one when none seems
  // to: its error is then the driver's); false with *why.
  bool getFunction(const DriverApi& driver, const Loaded& entry, const std::string& name,
                   cu::Function* fn, std::string* why) const;

  // The image to load on a device of compute capability major.minor, and whether to use its PTX:
  // an exact architecture first, then a cubin of the same major and no greater minor, then PTX of
  // a lower architecture (not an arch-specific "a" one: its PTX only runs on that architecture).
  const Image* choose(int major, int minor, bool* usePtx) const;

  std::string describeTargets() const;

  // Loads the modules of entry.image that `entry` (one context's) does not hold yet, in order:
  // all of them at first, the deferred ones once built. False with *why at the first that fails.
  // Under `mutex`.
  bool loadModules(const DriverApi& driver, Loaded& entry, std::string* why) const;

  // Builds the deferred modules (once; concurrent callers wait for the one build) and appends
  // them to the first image. Not under `mutex`, which launches on other threads take meanwhile.
  Status buildDeferred();

  // Loads the module into `context` (once per context); the function, or null with *error set.
  Loaded* function(const DriverApi& driver, cu::Context context, std::string* error);

  // The module in `context` with its backward entries resolved, or null with *error set.
  Loaded* backwardFunctions(const DriverApi& driver, cu::Context context, std::string* error);

  // backwardFunctions() and the deterministic mode's entries, after building the deferred modules
  // that hold them where the JIT deferred them (the first image's) and loading those here.
  Loaded* deterministicFunctions(const DriverApi& driver, cu::Context context, std::string* error);

  // The module in `context` with its decode entries resolved, or null with *error set.
  Loaded* decodeFunctions(const DriverApi& driver, cu::Context context, std::string* error);

  // Backward entry `which` into entry.backward, with its shared memory opted into. Under `mutex`.
  bool resolveBackward(const DriverApi& driver, Loaded& entry, BackwardEntry which,
                       std::string* why) const;
};

// The driver, the current context and the kernel's modules loaded there (the forward's entries).
struct InContext {
  const DriverApi* driver = nullptr;
  cu::Context context = nullptr;
  const Kernel::Impl::Loaded* loaded = nullptr;
};
// They, or why not (`who` starts a driver error).
Status loadedInContext(Kernel::Impl& impl, const char* who, InContext* at);

}  // namespace attnc
