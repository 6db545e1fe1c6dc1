/* Compiles a spec for sm_90a through the C API (libattnc.so, attnc::attnc_c) and prints what the
 * kernel is; no GPU needed. Exit status 0 on success, else the ATTNC_ERROR_* code.
 *   c-api-app [SPEC.yaml]       (default: a causal spec given as text) */
#include "attnc/attnc_c.h"

#include <stdio.h>

static const char* kSpec = "name: c_api_causal\nhead_dim: 64\nheads: 8\nmask: causal\n";

int main(int argc, char** argv) {
  attnc_kernel* kernel = NULL;
  char* error = NULL;
  int code = argc > 1 ? attnc_compile_file(argv[1], "sm_90a", &kernel, &error)
                      : attnc_compile_text(kSpec, "sm_90a", &kernel, &error);
  if (code != ATTNC_OK) {
    const char* kind = code == ATTNC_ERROR_BAD_SPEC ? "bad spec"
                       : code == ATTNC_ERROR_NVRTC  ? "NVRTC"
                                                    : "error";
    fprintf(stderr, "attnc %s (%s, code %d): %s\n", attnc_version(), kind, code, error);
    attnc_free_string(error);
    return code;
  }
  attnc_info info;
  attnc_kernel_info(kernel, &info);
  printf("attnc %s: %s for %s, entry %s, %d threads, %lld B shared\n", attnc_version(), info.name,
         info.target, info.entry, info.threads, (long long)info.smem_bytes);
  attnc_kernel_free(kernel);
  return 0;
}
