/* One of the libraries tests/c/dlopen_tls.c loads (built as libtls_ID.so): thread-local
 * storage of its own, and an initialiser that allocates above the interposer's floor while
 * dlopen runs it, grows that block with realloc and touches its thread-local storage. Each
 * library loaded with thread-local storage may make the dynamic loader grow the thread's
 * table of them (the DTV) with malloc and realloc of its own, from inside the loader. */
#include <stdlib.h>
#include <string.h>

#define MIB (1024 * 1024)

static __thread long local[64];
static unsigned char *block;

__attribute__((constructor)) static void init(void) {
    block = malloc(2 * MIB);
    if (block) memset(block, ID, 2 * MIB);
    unsigned char *grown = block ? realloc(block, 3 * MIB) : NULL;
    if (grown) {
        memset(grown + 2 * MIB, ID + 1, MIB);
        block = grown;
    }
    local[0] = ID;
}

/* ID * 2 + 1 when the initialiser ran and its memory and thread-local storage hold what it
 * wrote. */
long tls_check(void) {
    if (!block) return -1;
    return block[12345] + block[2 * MIB + 7] + local[0] - ID;
}
