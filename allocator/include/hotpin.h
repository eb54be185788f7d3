/* hotpin: a hint-driven pinning allocator. Link with -lhotpin (libhotpin.so). */
#ifndef HOTPIN_H
#define HOTPIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum hotpin_mode {
    HOTPIN_PIN_NONE = 0, /* everything pageable (baseline) */
    HOTPIN_PIN_ALL = 1,  /* everything pinned (baseline) */
    HOTPIN_PROFILE = 2,  /* everything pinned while `tracer` records a history */
    HOTPIN_USE = 3,      /* pin what `history_path` says was hot, the rest pageable */
};

/* Sets the mode before the first allocation; returns 0, or -1 with a message on stderr (an
 * unreadable history, a second call). Without it, HOTPIN_MODE, HOTPIN_HISTORY,
 * HOTPIN_PINNED_BUDGET and HOTPIN_CUDART are read at the first allocation. */
int hotpin_init(int mode, const char *history_path);

/* Never fails where malloc would succeed: pinning problems fall back to pageable memory.
 * Returns NULL only when the memory cannot be had at all. */
void *hotpin_malloc(size_t size);

/* Returns 0; -1 for a pointer hotpin did not hand out or freed already (reported, nothing
 * touched). NULL is accepted. */
int hotpin_free(void *ptr);

struct hotpin_stats {
    uint64_t allocations, frees;
    uint64_t pinned_bytes, pageable_bytes, peak_pinned_bytes;
    uint64_t pinned_allocations, pageable_allocations;
    uint64_t cache_hits, cached_bytes;
    uint64_t fallback_budget, fallback_pin_failed, fallback_no_cuda, fallback_pressure;
    uint64_t double_frees, foreign_frees;
    uint64_t pin_time_ns;
};

/* Fills *out; returns 0, or -1 for a NULL pointer. */
int hotpin_stats(struct hotpin_stats *out);

#ifdef __cplusplus
}
#endif
#endif
