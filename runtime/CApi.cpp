// The C API (include/attnc/attnc_c.h) over the C++ one, for libattnc.so. Nothing may escape as an
// exception: each entry point catches everything and reports it as an ATTNC_ERROR_* code and a
// message.
#include "attnc/attnc.h"
#include "attnc/attnc_c.h"

#include "runtime/CApiErrors.h"
#include "runtime/Driver.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>

struct attnc_kernel {
  attnc::Kernel kernel;
  std::vector<std::string> inputNames;
};

struct attnc_prepared {
  attnc::PreparedInputs prepared;
};

namespace {

using attnc::capi::compileFailureCode;
using attnc::capi::launchFailureCode;

// Reports a failure: the message into *error, and `code` (an ATTNC_ERROR_*) as the result.
int fail(char** error, int code, const std::string& message) {
  if (error) {
    *error = static_cast<char*>(std::malloc(message.size() + 1));
    if (*error) std::memcpy(*error, message.c_str(), message.size() + 1);
  }
  return code;
}

int failArgument(char** error, const std::string& message) {
  return fail(error, ATTNC_ERROR_BAD_ARGUMENT, message);
}

int failInternal(char** error, const char* function, const std::exception* e) {
  return fail(
      error, ATTNC_ERROR_INTERNAL,
      std::string(function) + ": internal error" + (e ? std::string(": ") + e->what() : ""));
}

attnc::JitCompiler& jit() {
  static attnc::JitCompiler compiler;  // thread-safe; the cache directory follows the environment
  return compiler;
}

// The target named, or the current device's (its context's device, else device 0): ATTNC_OK, or
// the code of why not (an unknown name; no driver or device).
int resolveTarget(const char* name, attnc::Target* target, std::string* error) {
  if (name) {
    std::optional<attnc::Target> known = attnc::Target::byName(name, error);
    if (known) *target = *known;
    return known ? ATTNC_OK : ATTNC_ERROR_BAD_ARGUMENT;
  }
  const attnc::DriverApi* driver = attnc::DriverApi::get(error);
  if (!driver) {
    *error = "no target given and no CUDA device to take it from: " + *error;
    return ATTNC_ERROR_NO_GPU;
  }
  int ordinal = 0;
  attnc::cu::Context context = nullptr;
  attnc::cu::Device device = 0;
  if (driver->cuCtxGetCurrent(&context) == attnc::cu::kSuccess && context &&
      driver->cuCtxGetDevice(&device) == attnc::cu::kSuccess)
    ordinal = device;  // CUdevice handles are ordinals
  attnc::Status status;
  *target = attnc::Target::fromDevice(ordinal, &status);
  if (!status) *error = "no target given and none from the CUDA device: " + status.message;
  return status ? ATTNC_OK : ATTNC_ERROR_NO_GPU;
}

template <class Compile>
int compileWith(const char* target, attnc_kernel** out, char** error, Compile compile) {
  if (!out) return failArgument(error, "attnc_compile: out is null");
  *out = nullptr;
  try {
    std::string why;
    attnc::Target resolved;
    if (int code = resolveTarget(target, &resolved, &why); code != ATTNC_OK)
      return fail(error, code, why);
    attnc::Status status;
    attnc::Kernel kernel = compile(resolved, &status);
    if (!status) return fail(error, compileFailureCode(status.message), status.message);
    auto* handle = new attnc_kernel{kernel, kernel.inputNames()};
    *out = handle;
    return ATTNC_OK;
  } catch (const std::bad_alloc&) {
    return fail(error, ATTNC_ERROR_OUT_OF_MEMORY, "attnc_compile: out of host memory");
  } catch (const std::exception& e) {
    return failInternal(error, "attnc_compile", &e);
  } catch (...) {
    return failInternal(error, "attnc_compile", nullptr);
  }
}

attnc::TensorArg tensor(const attnc_tensor& t) { return {t.data, t.stride_b, t.stride_h, t.stride_s}; }
attnc::OutputArg output(const attnc_tensor& t) {
  return {const_cast<void*>(t.data), t.stride_b, t.stride_h, t.stride_s};
}

// The fields attnc_forward_args and attnc_backward_args share (same names in both): sizes, declared
// inputs and the dropout stream. `what` names the struct in errors. num_inputs is compared with
// the kernel's declared inputs before the array is read: the caller's array is only known to hold
// as many entries as the kernel declares.
template <class In, class Args>
int copySharedArgs(const attnc_kernel* kernel, const In* in, Args* args, const char* what,
                   char** error) {
  if (!in) return failArgument(error, std::string(what) + ": null");
  const std::vector<std::string>& names = kernel->inputNames;
  if (in->num_inputs < 0 || uint64_t(in->num_inputs) != names.size()) {
    std::string list;
    for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
    return failArgument(error, std::string(what) + ".num_inputs: expected " +
                                   std::to_string(names.size()) + " (the kernel's declared inputs" +
                                   (list.empty() ? "" : ": " + list) + "), got " +
                                   std::to_string(in->num_inputs));
  }
  if (in->num_inputs > 0 && !in->inputs)
    return failArgument(error, std::string(what) + ".inputs: expected " +
                                   std::to_string(in->num_inputs) + " inputs, got null");
  args->lse = in->lse;
  args->batch = in->batch;
  args->q_len = in->q_len;
  args->kv_len = in->kv_len;
  for (int64_t i = 0; i < in->num_inputs; ++i)
    args->inputs.push_back({in->inputs[i].data, in->inputs[i].stride_b, in->inputs[i].stride_h,
                            in->inputs[i].stride_pos});
  args->dropout_seed = in->dropout_seed;
  args->dropout_offset = in->dropout_offset;
  return ATTNC_OK;
}

int toForwardArgs(const attnc_kernel* kernel, const attnc_forward_args* in,
                  attnc::ForwardArgs* args, char** error) {
  if (int status = copySharedArgs(kernel, in, args, "attnc_forward_args", error);
      status != ATTNC_OK)
    return status;
  args->q = tensor(in->q);
  args->k = tensor(in->k);
  args->v = tensor(in->v);
  args->o = output(in->o);
  return ATTNC_OK;
}

int toBackwardArgs(const attnc_kernel* kernel, const attnc_backward_args* in,
                   attnc::BackwardArgs* args, char** error) {
  if (int status = copySharedArgs(kernel, in, args, "attnc_backward_args", error);
      status != ATTNC_OK)
    return status;
  if (in->deterministic != 0 && in->deterministic != 1)
    return failArgument(error, "attnc_backward_args.deterministic: expected 0 or 1, got " +
                                   std::to_string(in->deterministic));
  if (in->reserved != 0)
    return failArgument(
        error, "attnc_backward_args.reserved: expected 0, got " + std::to_string(in->reserved));
  if (in->workspace_bytes < 0)
    return failArgument(error,
                        "attnc_backward_args.workspace_bytes: expected a non-negative size, got " +
                            std::to_string(in->workspace_bytes));
  args->q = tensor(in->q);
  args->k = tensor(in->k);
  args->v = tensor(in->v);
  args->o = tensor(in->o);
  args->d_o = tensor(in->d_o);
  args->dq = output(in->dq);
  args->dk = output(in->dk);
  args->dv = output(in->dv);
  args->deterministic = in->deterministic == 1;
  args->workspace = in->workspace;
  args->workspace_bytes = size_t(in->workspace_bytes);
  return ATTNC_OK;
}

// The largest struct_size read: no version of the versioned structs comes near it, so a larger
// value is no size (an unset field) and its bytes would run past the caller's struct.
constexpr uint32_t kMaxStructSize = 4096;

// *out: the caller's struct `in` of in->struct_size bytes, written against a version of
// attnc_c.h this library may not know. The fields an older caller lacks read as 0; the bytes a
// newer caller has past this library's struct must be 0 (else an option would be ignored
// silently). `minimum`: the bytes through `lastRequired`, the oldest version's last field.
template <class T>
int readVersioned(const T* in, const char* what, size_t minimum, const char* lastRequired,
                  T* out, char** error) {
  const uint32_t size = in->struct_size;
  if (size < minimum || size > kMaxStructSize)
    return failArgument(error, std::string(what) + ".struct_size: expected at least " +
                                   std::to_string(minimum) + " (through " + lastRequired +
                                   "; sizeof(" + what + ") = " + std::to_string(sizeof(T)) +
                                   ") and at most " + std::to_string(kMaxStructSize) + ", got " +
                                   std::to_string(size));
  std::memset(out, 0, sizeof(T));
  std::memcpy(out, in, std::min<size_t>(size, sizeof(T)));
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (size_t i = sizeof(T); i < size; ++i)
    if (bytes[i] != 0)
      return failArgument(error, std::string(what) + ": expected 0 in the bytes past this "
                                     "library's struct (" + std::to_string(sizeof(T)) +
                                     ": a newer attnc_c.h's field this library does not know), "
                                     "got byte " + std::to_string(i) + " = " +
                                     std::to_string(bytes[i]) + " of struct_size " +
                                     std::to_string(size));
  return ATTNC_OK;
}

// *out: the caller's attnc_seq_layout, read as readVersioned reads it, its reserved field checked.
int readSeqLayout(const attnc_seq_layout* in, attnc_seq_layout* out, char** error) {
  if (int code = readVersioned(in, "attnc_seq_layout",
                               offsetof(attnc_seq_layout, v_stride_page) + sizeof(int64_t),
                               "v_stride_page", out, error);
      code != ATTNC_OK)
    return code;
  if (out->reserved != 0)
    return failArgument(
        error, "attnc_seq_layout.reserved: expected 0, got " + std::to_string(out->reserved));
  return ATTNC_OK;
}

// A layout's varlen part is given where any of its fields is set, its paged part likewise, so a
// field set without the array it belongs to is an error naming the array (Kernel::validate)
// rather than ignored.
bool hasVarlen(const attnc_seq_layout& l) {
  return l.cu_seqlens_q || l.cu_seqlens_kv || l.total_q || l.total_kv || l.host_cu_seqlens_q ||
         l.host_cu_seqlens_kv;
}
attnc::VarlenArg varlenOf(const attnc_seq_layout& l) {
  return {l.cu_seqlens_q,      l.cu_seqlens_kv,     l.total_q, l.total_kv,
          l.host_cu_seqlens_q, l.host_cu_seqlens_kv};
}

// The paged part's fields in the struct's order: a pointer's value is 1 where it is set.
struct PagedField {
  const char* name;
  int64_t value;
  bool pointer;
};
std::vector<PagedField> pagedFields(const attnc_seq_layout& l) {
  return {{"block_table", l.block_table != nullptr, true},
          {"seq_lens_kv", l.seq_lens_kv != nullptr, true},
          {"block_table_stride", l.block_table_stride, false},
          {"max_pages", l.max_pages, false},
          {"page_size", l.page_size, false},
          {"num_pages", l.num_pages, false},
          {"k_stride_page", l.k_stride_page, false},
          {"v_stride_page", l.v_stride_page, false},
          {"host_block_table", l.host_block_table != nullptr, true},
          {"host_seq_lens_kv", l.host_seq_lens_kv != nullptr, true}};
}
bool hasPaged(const attnc_seq_layout& l) {
  for (const PagedField& field : pagedFields(l))
    if (field.value) return true;
  return false;
}

// The C++ arguments of an attnc_forward_args_ex, with the layout descriptions they point to.
struct ForwardArgsEx : attnc::ForwardArgs {
  attnc::VarlenArg varlenArg;
  attnc::PagedKVArg pagedArg;
  ForwardArgsEx() = default;
  ForwardArgsEx(const ForwardArgsEx&) = delete;  // varlen and paged point into it
  ForwardArgsEx& operator=(const ForwardArgsEx&) = delete;
};

// attnc_forward_args_ex (and its attnc_seq_layout) as attnc::ForwardArgs.
int toForwardArgsEx(const attnc_kernel* kernel, const attnc_forward_args_ex* in,
                    ForwardArgsEx* args, char** error) {
  if (!in) return failArgument(error, "attnc_forward_args_ex: null");
  attnc_forward_args_ex ex;
  if (int code = readVersioned(in, "attnc_forward_args_ex",
                               offsetof(attnc_forward_args_ex, layout) + sizeof(void*), "layout",
                               &ex, error);
      code != ATTNC_OK)
    return code;
  if (ex.reserved != 0)
    return failArgument(
        error, "attnc_forward_args_ex.reserved: expected 0, got " + std::to_string(ex.reserved));
  if (ex.workspace_bytes < 0)
    return failArgument(error,
                        "attnc_forward_args_ex.workspace_bytes: expected a non-negative size, "
                        "got " + std::to_string(ex.workspace_bytes));
  if (int code = toForwardArgs(kernel, &ex.base, args, error); code != ATTNC_OK) return code;
  // (an int outside the enum is Kernel::validate's to refuse, by its value)
  args->decode = static_cast<attnc::DecodeChoice>(ex.decode);
  args->num_splits = ex.num_splits;
  args->workspace = ex.workspace;
  args->workspace_bytes = size_t(ex.workspace_bytes);
  if (ex.prepared) args->prepared = &ex.prepared->prepared;
  if (!ex.layout) return ATTNC_OK;
  attnc_seq_layout l;
  if (int code = readSeqLayout(ex.layout, &l, error); code != ATTNC_OK) return code;
  if (hasVarlen(l)) {
    args->varlenArg = varlenOf(l);
    args->varlen = &args->varlenArg;
  }
  if (hasPaged(l)) {
    args->pagedArg = {l.block_table,   l.seq_lens_kv,      l.block_table_stride,
                      l.max_pages,     l.page_size,        l.num_pages,
                      l.k_stride_page, l.v_stride_page,    l.host_block_table,
                      l.host_seq_lens_kv};
    args->paged = &args->pagedArg;
  }
  return ATTNC_OK;
}

// The C++ arguments of an attnc_backward_args_ex, with the varlen description they point to.
struct BackwardArgsEx : attnc::BackwardArgs {
  attnc::VarlenArg varlenArg;
  BackwardArgsEx() = default;
  BackwardArgsEx(const BackwardArgsEx&) = delete;  // varlen points into it
  BackwardArgsEx& operator=(const BackwardArgsEx&) = delete;
};

// attnc_backward_args_ex (and its attnc_seq_layout's varlen part) as attnc::BackwardArgs. A paged
// field is refused by name here: attnc::BackwardArgs has nowhere to put it.
int toBackwardArgsEx(const attnc_kernel* kernel, const attnc_backward_args_ex* in,
                     BackwardArgsEx* args, char** error) {
  if (!in) return failArgument(error, "attnc_backward_args_ex: null");
  attnc_backward_args_ex ex;
  if (int code = readVersioned(in, "attnc_backward_args_ex",
                               offsetof(attnc_backward_args_ex, layout) + sizeof(void*), "layout",
                               &ex, error);
      code != ATTNC_OK)
    return code;
  if (ex.reserved != 0)
    return failArgument(
        error, "attnc_backward_args_ex.reserved: expected 0, got " + std::to_string(ex.reserved));
  if (int code = toBackwardArgs(kernel, &ex.base, args, error); code != ATTNC_OK) return code;
  if (!ex.layout) return ATTNC_OK;
  attnc_seq_layout l;
  if (int code = readSeqLayout(ex.layout, &l, error); code != ATTNC_OK) return code;
  for (const PagedField& field : pagedFields(l))
    if (field.value)
      return failArgument(error, std::string("attnc_backward_args_ex.layout->") + field.name +
                                     (field.pointer ? ": expected null" : ": expected 0") +
                                     " (the backward takes no paged K/V), got " +
                                     (field.pointer ? "a pointer" : std::to_string(field.value)));
  if (hasVarlen(l)) {
    args->varlenArg = varlenOf(l);
    args->varlen = &args->varlenArg;
  }
  return ATTNC_OK;
}

// The shape of every launch-or-validate entry point: a null kernel, the C struct converted (its
// errors name the field), the call, and any exception, each become an error code and message.
// The launches validate their arguments themselves (with the same message); `validate` runs again
// only after a failure, to tell a refused argument (ATTNC_ERROR_BAD_ARGUMENT) from a failure past
// validation (launchFailureCode), so a successful launch checks its arguments once.
template <class Args, class CArgs, class Convert, class Validate, class Call>
int callKernel(const char* function, const attnc_kernel* kernel, const CArgs* in, Convert convert,
               char** error, Validate validate, Call call) {
  if (!kernel) return failArgument(error, std::string(function) + ": kernel is null");
  try {
    Args converted;
    if (int code = convert(kernel, in, &converted, error); code != ATTNC_OK) return code;
    attnc::Status status = call(converted);
    if (status) return ATTNC_OK;
    if (!validate(converted)) return failArgument(error, status.message);
    return fail(error, launchFailureCode(status.message), status.message);
  } catch (const std::bad_alloc&) {
    return fail(error, ATTNC_ERROR_OUT_OF_MEMORY, std::string(function) + ": out of host memory");
  } catch (const std::exception& e) {
    return failInternal(error, function, &e);
  } catch (...) {
    return failInternal(error, function, nullptr);
  }
}

// The validation step of each launch (no GPU needed).
auto validateForward(const attnc_kernel* kernel) {
  return [kernel](const attnc::ForwardArgs& a) { return kernel->kernel.validate(a); };
}
auto validateBackward(const attnc_kernel* kernel) {
  return [kernel](const attnc::BackwardArgs& a) { return kernel->kernel.validateBackward(a); };
}
// The validate entry points: their call is the validation itself, nothing to run again.
constexpr auto noValidation = [](const auto&) { return attnc::Status::success(); };

// toForwardArgs / toBackwardArgs with `prepared` set, for the *_prepared launches (validated with
// it, so that one made for another kernel or other lengths is a bad argument).
template <class Args, class CArgs, class Convert>
auto withPrepared(Convert convert, const attnc_prepared* prepared) {
  return
      [convert, prepared](const attnc_kernel* kernel, const CArgs* in, Args* args, char** error) {
    args->prepared = &prepared->prepared;
    return convert(kernel, in, args, error);
      };
}

bool knownFlags(uint32_t flags, char** error, const char* function) {
  if (flags & ~uint32_t(ATTNC_COMPILE_BACKWARD)) {
    failArgument(error, std::string(function) + ": unknown flags " + std::to_string(flags) +
                            " (expected a combination of ATTNC_COMPILE_BACKWARD)");
    return false;
  }
  return true;
}

// attnc_compile_*_opts: the options checked (each field by name), then a JitCompiler of their
// own (the shared one when they change nothing that it holds) compiles with `compile`.
template <class Compile>
int compileWithOptions(const attnc_compile_options* options, const char* function,
                       const char* target, attnc_kernel** out, char** error, Compile compile) {
  const std::string name = function;
  if (!options)
    return compileWith(target, out, error, [&](const attnc::Target& t, attnc::Status* s) {
      return compile(jit(), false, t, s);
    });
  // The fields present in the oldest struct this library reads.
  constexpr uint32_t kMinimumSize = offsetof(attnc_compile_options, log_user_data) + sizeof(void*);
  if (options->struct_size < kMinimumSize)
    return failArgument(
        error, name + ": options->struct_size: expected at least " + std::to_string(kMinimumSize) +
                   " (sizeof(attnc_compile_options)), got " + std::to_string(options->struct_size));
  if (!knownFlags(options->flags, error, function)) return ATTNC_ERROR_BAD_ARGUMENT;
  if (!(options->timeout_seconds >= 0) || options->timeout_seconds > 1e9)
    return failArgument(error,
                        name +
                            ": options->timeout_seconds: expected 0 (no limit) or a positive "
                            "number of seconds, got " +
                            std::to_string(options->timeout_seconds));
  if (options->use_cache != 0 && options->use_cache != 1 && options->use_cache != -1)
    return failArgument(error, name + ": options->use_cache: expected 0, 1 or -1, got " +
                                   std::to_string(options->use_cache));
  if (options->reserved != 0)
    return failArgument(
        error, name + ": options->reserved: expected 0, got " + std::to_string(options->reserved));
  const bool backward = options->flags & ATTNC_COMPILE_BACKWARD;
  const bool defaults = !options->cache_dir && options->use_cache != -1 &&
                        options->timeout_seconds == 0 && !options->log;
  if (defaults)
    return compileWith(target, out, error, [&](const attnc::Target& t, attnc::Status* s) {
      return compile(jit(), backward, t, s);
    });
  attnc::JitOptions jitOptions;
  if (options->cache_dir) jitOptions.cacheDir = options->cache_dir;
  jitOptions.useCache = options->use_cache != -1;
  jitOptions.compileTimeoutSeconds = options->timeout_seconds;
  if (attnc_log_fn log = options->log) {
    void* user = options->log_user_data;
    jitOptions.log = [log, user](const std::string& message) { log(user, message.c_str()); };
  }
  return compileWith(target, out, error, [&](const attnc::Target& t, attnc::Status* s) {
    attnc::JitCompiler compiler(std::move(jitOptions));
    return compile(compiler, backward, t, s);
  });
}

}  // namespace

// The target builds with hidden visibility; the C API is what libattnc.so exports (with the
// version script as the second filter).
#pragma GCC visibility push(default)
extern "C" {

const char* attnc_version(void) { return attnc::version(); }

int attnc_compile_file_ex(const char* spec_path, const char* target, uint32_t flags,
                          attnc_kernel** out, char** error) {
  if (!spec_path) return failArgument(error, "attnc_compile_file: spec_path is null");
  if (!knownFlags(flags, error, "attnc_compile_file_ex")) return ATTNC_ERROR_BAD_ARGUMENT;
  bool backward = flags & ATTNC_COMPILE_BACKWARD;
  return compileWith(target, out, error, [&](const attnc::Target& t, attnc::Status* s) {
    return jit().compileFile(spec_path, t, s, backward);
  });
}

int attnc_compile_text_ex(const char* yaml, const char* target, uint32_t flags, attnc_kernel** out,
                          char** error) {
  if (!yaml) return failArgument(error, "attnc_compile_text: yaml is null");
  if (!knownFlags(flags, error, "attnc_compile_text_ex")) return ATTNC_ERROR_BAD_ARGUMENT;
  bool backward = flags & ATTNC_COMPILE_BACKWARD;
  return compileWith(target, out, error, [&](const attnc::Target& t, attnc::Status* s) {
    return jit().compileText(yaml, t, s, backward);
  });
}

int attnc_compile_file_opts(const char* spec_path, const char* target,
                            const attnc_compile_options* options, attnc_kernel** out,
                            char** error) {
  if (!spec_path) return failArgument(error, "attnc_compile_file_opts: spec_path is null");
  return compileWithOptions(options, "attnc_compile_file_opts", target, out, error,
                            [&](attnc::JitCompiler& compiler, bool backward,
                                const attnc::Target& t, attnc::Status* s) {
                              return compiler.compileFile(spec_path, t, s, backward);
                            });
}

int attnc_compile_text_opts(const char* yaml, const char* target,
                            const attnc_compile_options* options, attnc_kernel** out,
                            char** error) {
  if (!yaml) return failArgument(error, "attnc_compile_text_opts: yaml is null");
  return compileWithOptions(options, "attnc_compile_text_opts", target, out, error,
                            [&](attnc::JitCompiler& compiler, bool backward,
                                const attnc::Target& t, attnc::Status* s) {
                              return compiler.compileText(yaml, t, s, backward);
                            });
}

int attnc_compile_file(const char* spec_path, const char* target, attnc_kernel** out, char** error) {
  return attnc_compile_file_ex(spec_path, target, 0, out, error);
}

int attnc_compile_text(const char* yaml, const char* target, attnc_kernel** out, char** error) {
  return attnc_compile_text_ex(yaml, target, 0, out, error);
}

int attnc_kernel_validate(const attnc_kernel* kernel, const attnc_forward_args* args, char** error) {
  return callKernel<attnc::ForwardArgs>(
      "attnc_kernel_validate", kernel, args, toForwardArgs, error, noValidation,
      [&](const attnc::ForwardArgs& a) { return kernel->kernel.validate(a); });
}

int attnc_kernel_forward(const attnc_kernel* kernel, const attnc_forward_args* args, void* stream,
                         char** error) {
  return callKernel<attnc::ForwardArgs>(
      "attnc_kernel_forward", kernel, args, toForwardArgs, error, validateForward(kernel),
      [&](const attnc::ForwardArgs& a) { return kernel->kernel.forward(a, stream); });
}

int attnc_kernel_validate_ex(const attnc_kernel* kernel, const attnc_forward_args_ex* args,
                             char** error) {
  return callKernel<ForwardArgsEx>(
      "attnc_kernel_validate_ex", kernel, args, toForwardArgsEx, error, noValidation,
      [&](const attnc::ForwardArgs& a) { return kernel->kernel.validate(a); });
}

int attnc_kernel_forward_ex(const attnc_kernel* kernel, const attnc_forward_args_ex* args,
                            void* stream, char** error) {
  return callKernel<ForwardArgsEx>(
      "attnc_kernel_forward_ex", kernel, args, toForwardArgsEx, error, validateForward(kernel),
      [&](const attnc::ForwardArgs& a) { return kernel->kernel.forward(a, stream); });
}

int attnc_kernel_decode_plan(const attnc_kernel* kernel, const attnc_forward_args_ex* args,
                             int32_t num_sms, attnc_decode_plan* out, char** error) {
  if (!out) return failArgument(error, "attnc_kernel_decode_plan: out is null");
  *out = attnc_decode_plan{};
  if (num_sms < 0)
    return failArgument(error, "attnc_kernel_decode_plan: num_sms: expected 0 (the current "
                               "device's) or a number of SMs, got " + std::to_string(num_sms));
  return callKernel<ForwardArgsEx>(
      "attnc_kernel_decode_plan", kernel, args, toForwardArgsEx, error, validateForward(kernel),
      [&](const attnc::ForwardArgs& a) {
        attnc::DecodePlan plan;
        attnc::Status status = kernel->kernel.decodePlan(a, num_sms, &plan);
        if (status)
          *out = attnc_decode_plan{plan.decode ? 1 : 0, plan.rows,       plan.rowTiles,
                                   plan.splits,         plan.splitTiles, plan.blockKV,
                                   int64_t(plan.workspaceBytes)};
        return status;
      });
}

int64_t attnc_kernel_forward_workspace_bytes(const attnc_kernel* kernel,
                                             const attnc_forward_args_ex* args) {
  if (!kernel) return -1;
  try {
    ForwardArgsEx converted;
    if (toForwardArgsEx(kernel, args, &converted, nullptr) != ATTNC_OK) return -1;
    // The size asked for does not depend on the workspace given, if any.
    converted.workspace = nullptr;
    converted.workspace_bytes = 0;
    if (!kernel->kernel.validate(converted)) return -1;
    const size_t bytes = kernel->kernel.forwardWorkspaceBytes(converted);
    return bytes > size_t(INT64_MAX) ? -1 : int64_t(bytes);
  } catch (...) {
    return -1;
  }
}

int attnc_kernel_prepare_inputs(const attnc_kernel* kernel, const attnc_forward_args* args,
                                void* stream, attnc_prepared** out, char** error) {
  if (!out) return failArgument(error, "attnc_kernel_prepare_inputs: out is null");
  *out = nullptr;
  return callKernel<attnc::ForwardArgs>("attnc_kernel_prepare_inputs", kernel, args, toForwardArgs,
                                        error, validateForward(kernel),
                                        [&](const attnc::ForwardArgs& a) {
    auto made = std::make_unique<attnc_prepared>();
    attnc::Status status = kernel->kernel.prepareInputs(a, stream, &made->prepared);
    if (status) *out = made.release();
    return status;
  });
}

int attnc_kernel_forward_prepared(const attnc_kernel* kernel, const attnc_forward_args* args,
                                  const attnc_prepared* prepared, void* stream, char** error) {
  if (!prepared)
    return failArgument(error,
                        "attnc_kernel_forward_prepared: prepared: expected one made by "
                        "attnc_kernel_prepare_inputs, got null");
  return callKernel<attnc::ForwardArgs>(
      "attnc_kernel_forward_prepared", kernel, args,
      withPrepared<attnc::ForwardArgs, attnc_forward_args>(toForwardArgs, prepared), error,
      validateForward(kernel),
      [&](const attnc::ForwardArgs& a) { return kernel->kernel.forward(a, stream); });
}

int attnc_kernel_backward_prepared(const attnc_kernel* kernel, const attnc_backward_args* args,
                                   const attnc_prepared* prepared, void* stream, char** error) {
  if (!prepared)
    return failArgument(error,
                        "attnc_kernel_backward_prepared: prepared: expected one made by "
                        "attnc_kernel_prepare_inputs, got null");
  return callKernel<attnc::BackwardArgs>(
      "attnc_kernel_backward_prepared", kernel, args,
      withPrepared<attnc::BackwardArgs, attnc_backward_args>(toBackwardArgs, prepared), error,
      validateBackward(kernel),
      [&](const attnc::BackwardArgs& a) { return kernel->kernel.backward(a, stream); });
}

void attnc_prepared_free(attnc_prepared* prepared) { delete prepared; }

int attnc_kernel_backward_validate(const attnc_kernel* kernel, const attnc_backward_args* args,
                                   char** error) {
  return callKernel<attnc::BackwardArgs>(
      "attnc_kernel_backward_validate", kernel, args, toBackwardArgs, error, noValidation,
      [&](const attnc::BackwardArgs& a) { return kernel->kernel.validateBackward(a); });
}

int attnc_kernel_backward(const attnc_kernel* kernel, const attnc_backward_args* args, void* stream,
                          char** error) {
  return callKernel<attnc::BackwardArgs>(
      "attnc_kernel_backward", kernel, args, toBackwardArgs, error, validateBackward(kernel),
      [&](const attnc::BackwardArgs& a) { return kernel->kernel.backward(a, stream); });
}

int attnc_kernel_backward_validate_ex(const attnc_kernel* kernel,
                                      const attnc_backward_args_ex* args, char** error) {
  return callKernel<BackwardArgsEx>(
      "attnc_kernel_backward_validate_ex", kernel, args, toBackwardArgsEx, error, noValidation,
      [&](const attnc::BackwardArgs& a) { return kernel->kernel.validateBackward(a); });
}

int attnc_kernel_backward_ex(const attnc_kernel* kernel, const attnc_backward_args_ex* args,
                             void* stream, char** error) {
  return callKernel<BackwardArgsEx>(
      "attnc_kernel_backward_ex", kernel, args, toBackwardArgsEx, error, validateBackward(kernel),
      [&](const attnc::BackwardArgs& a) { return kernel->kernel.backward(a, stream); });
}

int attnc_kernel_compile_deferred(const attnc_kernel* kernel, int32_t* has_deferred,
                                  char** error) {
  if (!kernel) return failArgument(error, "attnc_kernel_compile_deferred: kernel is null");
  try {
    if (has_deferred) *has_deferred = kernel->kernel.hasDeferred() ? 1 : 0;
    attnc::Status status = kernel->kernel.compileDeferred();
    return status ? ATTNC_OK : fail(error, compileFailureCode(status.message), status.message);
  } catch (const std::bad_alloc&) {
    return fail(error, ATTNC_ERROR_OUT_OF_MEMORY,
                "attnc_kernel_compile_deferred: out of host memory");
  } catch (const std::exception& e) {
    return failInternal(error, "attnc_kernel_compile_deferred", &e);
  } catch (...) {
    return failInternal(error, "attnc_kernel_compile_deferred", nullptr);
  }
}

int64_t attnc_kernel_backward_workspace_bytes(const attnc_kernel* kernel, int64_t batch,
                                              int64_t q_len, int32_t deterministic) {
  if (!kernel || (deterministic != 0 && deterministic != 1)) return 0;
  // (at most INT64_MAX: Kernel::backwardWorkspaceBytes says 0 past it)
  return int64_t(kernel->kernel.backwardWorkspaceBytes(batch, q_len, deterministic == 1));
}

int attnc_kernel_info(const attnc_kernel* kernel, attnc_info* info) {
  if (!kernel || !info) return ATTNC_ERROR_BAD_ARGUMENT;
  const attnc::KernelMetadata& m = kernel->kernel.metadata();
  *info = attnc_info{m.name.c_str(), m.entry.c_str(), m.target.c_str(), m.dtype.c_str(),
                     m.threads, m.headDim, m.headDimV, m.headsQ, m.headsKV,
                     int32_t(m.inputs.size()), m.smemBytes, m.scale, m.dropout,
                     int32_t(m.hasBackward()), int32_t(m.dropoutRounds)};
  return ATTNC_OK;
}

const char* attnc_kernel_input_name(const attnc_kernel* kernel, int32_t index) {
  if (!kernel || index < 0 || size_t(index) >= kernel->inputNames.size()) return nullptr;
  return kernel->inputNames[size_t(index)].c_str();
}

void attnc_kernel_free(attnc_kernel* kernel) { delete kernel; }

void attnc_free_string(char* text) { std::free(text); }

}  // extern "C"
#pragma GCC visibility pop
