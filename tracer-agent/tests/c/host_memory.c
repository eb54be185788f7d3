/* Host memory the tracer should see without any allocator of ours: an anonymous mapping
 * touched page by page, copied from, grown with mremap (moving) and unmapped; a heap block
 * copied from; and one ioctl numbered like the NVIDIA driver's (type 'F', nr 0x2a) sent to
 * /dev/null, which refuses it, so the ioctl probe has something to count. Prints the
 * addresses as JSON. CUDA is the stand-in (a test fixture) named by HOTPIN_CUDART. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB (1ul << 20)
#define PAGE 4096ul

int main(void) {
    void *cudart = dlopen(getenv("HOTPIN_CUDART"), RTLD_NOW);
    if (!cudart) {
        fprintf(stderr, "host_memory: %s\n", dlerror());
        return 2;
    }
    int (*cuda_malloc)(void **, size_t) = (int (*)(void **, size_t))dlsym(cudart, "cudaMalloc");
    int (*cuda_memcpy)(void *, const void *, size_t, int) =
        (int (*)(void *, const void *, size_t, int))dlsym(cudart, "cudaMemcpy");
    void *dev;
    if (!cuda_malloc || !cuda_memcpy || cuda_malloc(&dev, MIB) != 0) return 3;

    /* 8 MiB, small pages (no transparent huge pages: one fault per page), touched in order. */
    size_t len = 8 * MIB;
    char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED || madvise(map, len, MADV_NOHUGEPAGE) != 0) return 4;
    for (size_t at = 0; at < len; at += PAGE) map[at] = 1;
    for (int i = 0; i < 3; i++) cuda_memcpy(dev, map + MIB, PAGE, 1);

    /* Grown to 16 MiB; the kernel may move it. The new half is touched. */
    char *grown = mremap(map, len, 2 * len, MREMAP_MAYMOVE);
    if (grown == MAP_FAILED || madvise(grown, 2 * len, MADV_NOHUGEPAGE) != 0) return 5;
    for (size_t at = len; at < 2 * len; at += PAGE) grown[at] = 2;
    cuda_memcpy(grown + len, dev, PAGE, 2);
    munmap(grown, 2 * len);

    /* Below malloc's mmap threshold: from the heap. */
    char *small = malloc(64 * 1024);
    memset(small, 3, 64 * 1024);
    cuda_memcpy(dev, small, 4096, 1);

    int null = open("/dev/null", O_RDONLY);
    unsigned long cmd = _IOWR('F', 0x2a, int);
    int arg = 0;
    ioctl(null, cmd, &arg);
    close(null);

    printf("{\"map\": %lu, \"grown\": %lu, \"small\": %lu}\n", (unsigned long)map,
           (unsigned long)grown, (unsigned long)small);
    free(small);
    return 0;
}
