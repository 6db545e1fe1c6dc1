/* The C API of attnc, for FFI (Python ctypes, Rust, ...): compile a spec to a kernel (JIT, with
 * the on-disk cache) and launch it on a CUDA stream. Every call returns ATTNC_OK or an error code
 * (ATTNC_ERROR_*, each nonzero: test `!= ATTNC_OK` for failure, the code for its kind); on error
 * *error (when error is not null) receives a malloc-ed message for attnc_free_string.
 * All structs are plain C with natural alignment; every integer is fixed-width. */
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a call returns. The message says what went wrong; the code, which kind of failure. */
#define ATTNC_OK 0
/* A failure that fits none of the kinds below (e.g. a kernel cache or environment variable that
 * cannot be used). */
#define ATTNC_ERROR 1
/* The spec was refused: YAML, unknown fields or values, type errors, or a variant the target's
 * kernels cannot run. The message has file:line:col (or `spec '<name>'`) and a caret. */
#define ATTNC_ERROR_BAD_SPEC 2
/* An argument of the call: a null pointer, an unknown target name or flag, an options field, a
 * launch argument (shape, stride, alignment, overlap, declared inputs, prepared inputs). The
 * message names the argument with what was expected and what was given. */
#define ATTNC_ERROR_BAD_ARGUMENT 3
/* No CUDA driver or device (target NULL without a GPU, a launch without one), or a CUDA driver
 * call that failed (module load, launch, context). */
#define ATTNC_ERROR_NO_GPU 4
/* NVRTC: not found (see $ATTNC_NVRTC_PATH), failed or timed out compiling the kernel. */
#define ATTNC_ERROR_NVRTC 5
/* Device memory ran out (a workspace, the declared inputs' summaries, a module). */
#define ATTNC_ERROR_OUT_OF_MEMORY 6
/* A bug in attnc (an exception or an internal inconsistency): please report it. */
#define ATTNC_ERROR_INTERNAL 7

typedef struct attnc_kernel attnc_kernel; /* opaque */
typedef struct attnc_prepared attnc_prepared; /* opaque: attnc::PreparedInputs */

/* Q, K, V or O: a device pointer (16-byte aligned) and element strides (multiples of 8) of the
 * batch, head and sequence dimensions; the head dimension is contiguous. */
typedef struct attnc_tensor {
  const void* data;
  int64_t stride_b, stride_h, stride_s;
} attnc_tensor;

/* A declared input (e.g. `doc`), in the spec's order: strides of the dims it has (b, h, pos). */
typedef struct attnc_input {
  const void* data;
  int64_t stride_b, stride_h, stride_pos;
} attnc_input;

/* One forward launch. batch in [1, 65535], q_len and kv_len in [1, 2^30]; every tensor's last
 * byte within INT64_MAX bytes of its start. What is written (o, lse) shares no byte with any
 * other tensor and o's rows none with each other; tensors only read may overlap (q == k).
 * docs/runtime.md, "Launch arguments", has every rule. */
typedef struct attnc_forward_args {
  attnc_tensor q, k, v;
  attnc_tensor o;               /* written */
  float* lse;                   /* [batch, heads_q, q_len] float32 contiguous, or NULL; written */
  int64_t batch, q_len, kv_len;
  const attnc_input* inputs;    /* num_inputs entries, read only when num_inputs equals the */
  int64_t num_inputs;           /* kernel's declared inputs (else an error) */
  uint64_t dropout_seed, dropout_offset;
} attnc_forward_args;

/* One backward launch (a kernel compiled with ATTNC_COMPILE_BACKWARD). o is the forward's output,
 * d_o the loss gradient with respect to it; dq, dk, dv are written. lse: the forward's LSE
 * (required). Inputs, dropout seed and offset: the forward's. deterministic 1: dQ without
 * atomics (bit-identical run to run, slower; a JIT kernel compiles that mode's two kernels on the
 * first such call); 0: the default; any other value is an error. workspace: NULL (the kernel
 * allocates and keeps one; shared by all calls on the kernel, so pass your own per stream when
 * launching on several streams concurrently) or at least attnc_kernel_backward_workspace_bytes(...)
 * bytes, 16-byte aligned. Bounds as attnc_forward_args; dq, dk, dv and the workspace's first
 * attnc_kernel_backward_workspace_bytes(...) bytes share no byte with each other or with any
 * other tensor (packed dq, dk, dv in one [b, s, 3, h, d] buffer are fine). */
typedef struct attnc_backward_args {
  attnc_tensor q, k, v, o, d_o;
  attnc_tensor dq, dk, dv;      /* written */
  const float* lse;
  int64_t batch, q_len, kv_len;
  const attnc_input* inputs;    /* num_inputs entries */
  int64_t num_inputs;
  uint64_t dropout_seed, dropout_offset;
  int32_t deterministic;
  int32_t reserved;             /* 0 */
  void* workspace;
  int64_t workspace_bytes;
} attnc_backward_args;

/* Sequences of different lengths and a paged K/V cache (attnc::VarlenArg and attnc::PagedKVArg in
 * attnc/attnc.h, which say what each field means). Varlen where cu_seqlens_q or cu_seqlens_kv is
 * not NULL; paged where block_table is not NULL; the host_* copies are optional (checked before
 * launch where given). struct_size: sizeof(attnc_seq_layout) of the caller's header; fields past
 * it read as 0, so a caller built against this version keeps working with later ones. */
typedef struct attnc_seq_layout {
  uint32_t struct_size;
  uint32_t reserved;            /* 0 */
  const int32_t* cu_seqlens_q;  /* device [batch + 1], or NULL */
  const int32_t* cu_seqlens_kv; /* device [batch + 1], or NULL */
  int64_t total_q, total_kv;
  const int32_t* block_table;   /* device [batch, block_table_stride], or NULL */
  const int32_t* seq_lens_kv;   /* device [batch]; required with block_table */
  int64_t block_table_stride, max_pages, page_size, num_pages;
  int64_t k_stride_page, v_stride_page;
  const int32_t* host_cu_seqlens_q;
  const int32_t* host_cu_seqlens_kv;
  const int32_t* host_block_table;
  const int32_t* host_seq_lens_kv;
} attnc_seq_layout;

/* attnc_forward_args with the inference options (attnc::ForwardArgs' varlen, paged, decode,
 * num_splits and workspace). struct_size: sizeof(attnc_forward_args_ex) of the caller's header, at
 * least up to `layout` (fields past it read as 0). decode: 0 auto, 1 off (the forward kernel), 2 on
 * (the decode kernel). num_splits: 0 derives them, else 1..128. workspace: NULL (the kernel's own)
 * or at least attnc_kernel_forward_workspace_bytes(...) bytes, 16-byte aligned. */
typedef struct attnc_forward_args_ex {
  uint32_t struct_size;
  int32_t decode;
  attnc_forward_args base;
  const attnc_seq_layout* layout; /* NULL: contiguous Q, K, V */
  int32_t num_splits;
  int32_t reserved;               /* 0 */
  void* workspace;
  int64_t workspace_bytes;
  const attnc_prepared* prepared; /* NULL, or as attnc_kernel_forward_prepared's */
} attnc_forward_args_ex;

/* attnc_backward_args with a packed batch (attnc::BackwardArgs' varlen): layout NULL is the
 * contiguous backward; else only its varlen part may be set (a paged field is an error: the
 * backward takes no paged K/V) and the host copies of the cu_seqlens it sets are required (the
 * sequences run one after another). dq and d_o are packed like q and o, dk and dv like k and v;
 * lse is the forward's ([heads_q, total_q] for packed Q). struct_size as attnc_forward_args_ex's:
 * sizeof(attnc_backward_args_ex) of the caller's header, at least up to `layout`. */
typedef struct attnc_backward_args_ex {
  uint32_t struct_size;
  int32_t reserved;               /* 0 */
  attnc_backward_args base;
  const attnc_seq_layout* layout; /* NULL: contiguous Q, K, V */
} attnc_backward_args_ex;

/* What a forward with given arguments launches (attnc::DecodePlan). */
typedef struct attnc_decode_plan {
  int32_t decode;      /* 1: the decode kernel; 0: the forward kernel */
  int32_t rows, row_tiles, splits, split_tiles, block_kv;
  int64_t workspace_bytes;
} attnc_decode_plan;

/* What attnc_kernel_info reports; the strings live as long as the kernel. */
typedef struct attnc_info {
  const char* name;
  const char* entry;
  const char* target;
  const char* dtype; /* "bf16" | "fp16" */
  int32_t threads;
  int32_t head_dim, head_dim_v, heads_q, heads_kv;
  int32_t num_inputs;
  int64_t smem_bytes;
  float scale, dropout; /* dropout: the spec's p; the kernels drop round(256 p) / 256 of elements */
  int32_t has_backward; /* compiled with ATTNC_COMPILE_BACKWARD */
  int32_t dropout_rounds; /* Philox4x32's rounds for the dropout decisions (7-10); 0 without */
} attnc_info;

/* Flags of attnc_compile_*_ex. */
#define ATTNC_COMPILE_BACKWARD 1u /* also compile the backward kernels (attnc_kernel_backward) */

/* "0.1.0" */
const char* attnc_version(void);

/* Compiles a spec (a YAML file, or YAML text) for `target` ("sm_80", "sm_90a", ...; NULL = the
 * current CUDA device's architecture). */
int attnc_compile_file(const char* spec_path, const char* target, attnc_kernel** out, char** error);
int attnc_compile_text(const char* yaml, const char* target, attnc_kernel** out, char** error);
/* As above with ATTNC_COMPILE_* flags (0: the same as without _ex). */
int attnc_compile_file_ex(const char* spec_path, const char* target, uint32_t flags,
                          attnc_kernel** out, char** error);
int attnc_compile_text_ex(const char* yaml, const char* target, uint32_t flags, attnc_kernel** out,
                          char** error);

/* Receives the JIT's warnings (e.g. a cache directory it cannot use, or a spec's warnings as
 * docs/spec.md lists them: "file:line:col: warning: ..."); `message` lives for the call. */
typedef void (*attnc_log_fn)(void* user_data, const char* message);

/* Options of attnc_compile_*_opts. Zero-initialize, then set
 * struct_size = sizeof(attnc_compile_options): fields added later are read only when struct_size
 * covers them. */
typedef struct attnc_compile_options {
  uint32_t struct_size;
  uint32_t flags;          /* ATTNC_COMPILE_* */
  double timeout_seconds;  /* wall-clock limit; 0: $ATTNC_COMPILE_TIMEOUT when set, else none */
  const char* cache_dir;   /* NULL: $ATTNC_CACHE_DIR, $XDG_CACHE_HOME/attnc or ~/.cache/attnc */
  int32_t use_cache;       /* 0: as 1 (the disk cache); -1: never read or write it */
  int32_t reserved;        /* 0 */
  attnc_log_fn log;        /* NULL: warnings go to stderr */
  void* log_user_data;
} attnc_compile_options;

/* As attnc_compile_file / attnc_compile_text with options (NULL: the defaults). */
int attnc_compile_file_opts(const char* spec_path, const char* target,
                            const attnc_compile_options* options, attnc_kernel** out, char** error);
int attnc_compile_text_opts(const char* yaml, const char* target,
                            const attnc_compile_options* options, attnc_kernel** out, char** error);

/* Validates the arguments, then launches on `stream` (a CUstream; NULL = the default stream). */
int attnc_kernel_forward(const attnc_kernel* kernel, const attnc_forward_args* args, void* stream,
                         char** error);
/* Only the argument checks of attnc_kernel_forward (no GPU needed). */
int attnc_kernel_validate(const attnc_kernel* kernel, const attnc_forward_args* args, char** error);

/* attnc_kernel_forward and attnc_kernel_validate with the inference options. */
int attnc_kernel_forward_ex(const attnc_kernel* kernel, const attnc_forward_args_ex* args,
                            void* stream, char** error);
int attnc_kernel_validate_ex(const attnc_kernel* kernel, const attnc_forward_args_ex* args,
                             char** error);
/* attnc::Kernel::decodePlan: what attnc_kernel_forward_ex(args) launches on a device of num_sms
 * SMs (0: the current device's). */
int attnc_kernel_decode_plan(const attnc_kernel* kernel, const attnc_forward_args_ex* args,
                             int32_t num_sms, attnc_decode_plan* out, char** error);
/* Bytes attnc_forward_args_ex.workspace needs on the current device; -1 where the arguments are
 * refused (attnc_kernel_validate_ex says why). */
int64_t attnc_kernel_forward_workspace_bytes(const attnc_kernel* kernel,
                                             const attnc_forward_args_ex* args);

/* attnc::Kernel::prepareInputs: launches on `stream` the work a forward (and, for a kernel with
 * backward kernels, a backward) does for the mask's declared inputs (their summaries, the tile
 * classes and order) into memory of its own, once, so that later launches with the same kernel,
 * lengths and inputs (unchanged contents) skip it: attnc_kernel_forward_prepared,
 * attnc_kernel_backward_prepared. Free with attnc_prepared_free once the launches that use it are
 * done (it frees device memory). */
int attnc_kernel_prepare_inputs(const attnc_kernel* kernel, const attnc_forward_args* args,
                                void* stream, attnc_prepared** out, char** error);
/* attnc_kernel_forward with `prepared` (from attnc_kernel_prepare_inputs with the same kernel,
 * lengths and inputs; an error otherwise). */
int attnc_kernel_forward_prepared(const attnc_kernel* kernel, const attnc_forward_args* args,
                                  const attnc_prepared* prepared, void* stream, char** error);
/* attnc_kernel_backward with `prepared` (a kernel compiled with backward prepares the backward's
 * part too; the backward's lengths and inputs are the forward's). */
int attnc_kernel_backward_prepared(const attnc_kernel* kernel, const attnc_backward_args* args,
                                   const attnc_prepared* prepared, void* stream, char** error);
void attnc_prepared_free(attnc_prepared* prepared);

/* Validates, then launches the backward kernels on `stream`. */
int attnc_kernel_backward(const attnc_kernel* kernel, const attnc_backward_args* args, void* stream,
                          char** error);
/* Only the argument checks of attnc_kernel_backward (no GPU needed). */
int attnc_kernel_backward_validate(const attnc_kernel* kernel, const attnc_backward_args* args,
                                   char** error);
/* attnc_kernel_backward and attnc_kernel_backward_validate with a packed batch. Without a layout
 * they are the plain calls, code and message. */
int attnc_kernel_backward_ex(const attnc_kernel* kernel, const attnc_backward_args_ex* args,
                             void* stream, char** error);
int attnc_kernel_backward_validate_ex(const attnc_kernel* kernel,
                                      const attnc_backward_args_ex* args, char** error);
/* attnc::Kernel::compileDeferred: a JIT kernel compiled with ATTNC_COMPILE_BACKWARD compiles the
 * deterministic mode's kernels on its first deterministic attnc_kernel_backward; this compiles
 * them now instead (no GPU needed), once. *has_deferred (may be NULL) is set to whether there was
 * anything to compile. ATTNC_OK at once for a kernel that defers nothing. */
int attnc_kernel_compile_deferred(const attnc_kernel* kernel, int32_t* has_deferred, char** error);
/* Bytes attnc_backward_args.workspace needs, exactly; 0 for a kernel without backward, batch
 * outside [1, 65535], q_len outside [1, 2^30], deterministic not 0 or 1, or a size past
 * INT64_MAX. */
int64_t attnc_kernel_backward_workspace_bytes(const attnc_kernel* kernel, int64_t batch,
                                              int64_t q_len, int32_t deterministic);

/* ATTNC_ERROR_BAD_ARGUMENT for a null kernel or info. */
int attnc_kernel_info(const attnc_kernel* kernel, attnc_info* info);
/* The name of declared input `index` (spec order), or NULL when out of range. */
const char* attnc_kernel_input_name(const attnc_kernel* kernel, int32_t index);

void attnc_kernel_free(attnc_kernel* kernel);
void attnc_free_string(char* text);

#ifdef __cplusplus
}
#endif
