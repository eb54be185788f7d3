/* NOT CUDA: a benchmark fixture. The few runtime and driver functions copy_hook.c reaches,
 * each returning success at once and doing nothing, so that what copy_hook.sh times is the
 * interposer's hook alone. Built twice, as libcudart.so.13 and libcuda.so.1. */
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT int cudaHostRegister(void *p, size_t n, unsigned flags) { (void)p; (void)n; (void)flags; return 0; }
EXPORT int cudaHostUnregister(void *p) { (void)p; return 0; }
EXPORT int cuMemHostRegister_v2(void *p, size_t n, unsigned flags) { (void)p; (void)n; (void)flags; return 0; }
EXPORT int cuMemHostUnregister(void *p) { (void)p; return 0; }
EXPORT int cuMemcpyHtoDAsync_v2(unsigned long long d, const void *s, size_t n, void *st) { (void)d; (void)s; (void)n; (void)st; return 0; }
EXPORT int cuStreamSynchronize(void *st) { (void)st; return 0; }
EXPORT int cuStreamIsCapturing(void *st, int *status) { (void)st; *status = 0; return 0; }
