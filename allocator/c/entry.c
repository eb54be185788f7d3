/* hotpin's C ABI entry points. They are thin on purpose: each passes its caller's return
 * address (the call site) to the Rust implementation. The tracer probes these symbols, so
 * they must stay real, exported, non-inlined functions. */
#include <stddef.h>

void *hotpin_malloc_at(size_t size, const void *caller);
int hotpin_free_at(void *ptr, const void *caller);

__attribute__((visibility("default"), noinline)) void *hotpin_malloc(size_t size) {
    return hotpin_malloc_at(size, __builtin_return_address(0));
}

__attribute__((visibility("default"), noinline)) int hotpin_free(void *ptr) {
    return hotpin_free_at(ptr, __builtin_return_address(0));
}
