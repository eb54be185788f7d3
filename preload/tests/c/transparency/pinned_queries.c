/* pinned_queries: what CUDA says about a pointer follows how the program allocated it.
 * Memory from malloc is unregistered, however often it is copied: cudaPointerGetAttributes
 * says cudaMemoryTypeUnregistered with no device pointer (and as host pointer the pointer
 * itself, as CUDA 13 does, or NULL), cuPointerGetAttribute
 * (MEMORY_TYPE) fails with CUDA_ERROR_INVALID_VALUE, cuPointerGetAttributes succeeds with
 * type 0, and cudaHostGetFlags and cudaHostGetDevicePointer fail. Memory from cudaMallocHost
 * is pinned host memory even if it is never copied: cudaMemoryTypeHost, CU_MEMORYTYPE_HOST,
 * cudaHostGetFlags succeeds, and cudaHostGetDevicePointer gives a device pointer that device
 * copies can read. Each kind is allocated several times from one call site. */
#include "cuda_decls.h"
#include "check.h"

#define SIZE (4 * MIB)
#define ROUNDS 4
#define COPIES 20

/* What one buffer's queries returned. */
struct observed {
    int attributes_rc, attributes_type, attributes_device;
    void *attributes_host, *attributes_device_pointer;
    int get_attribute_rc;
    unsigned get_attribute_type;
    int get_attributes_rc;
    unsigned get_attributes_type;
    int flags_rc;
    unsigned flags;
    int device_pointer_rc;
    void *device_pointer;
};

static struct observed query(void *p) {
    struct observed o;
    memset(&o, 0, sizeof o);
    struct cudaPointerAttributes attributes;
    memset(&attributes, 0x5A, sizeof attributes);
    o.attributes_rc = (int)cudaPointerGetAttributes(&attributes, p);
    o.attributes_type = (int)attributes.type;
    o.attributes_device = attributes.device;
    o.attributes_host = attributes.hostPointer;
    o.attributes_device_pointer = attributes.devicePointer;
    o.get_attribute_type = 77;
    o.get_attribute_rc = (int)cuPointerGetAttribute(&o.get_attribute_type,
                                                    CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                    (CUdeviceptr)(uintptr_t)p);
    CUpointer_attribute which[1] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
    o.get_attributes_type = 77;
    void *data[1] = {&o.get_attributes_type};
    o.get_attributes_rc = (int)cuPointerGetAttributes(1, which, data, (CUdeviceptr)(uintptr_t)p);
    o.flags = 77;
    o.flags_rc = (int)cudaHostGetFlags(&o.flags, p);
    o.device_pointer_rc = (int)cudaHostGetDevicePointer(&o.device_pointer, p, 0);
    return o;
}

static const char *relation(const void *pointer, const void *p) {
    return pointer == NULL ? "null" : pointer == p ? "the pointer" : "other";
}

static void describe(const char *key, const struct observed *o, const void *p) {
    detail(key,
           "{\"cudaPointerGetAttributes\": {\"rc\": %d, \"type\": %d, \"device\": %d, "
           "\"hostPointer\": \"%s\", \"devicePointer\": \"%s\"}, "
           "\"cuPointerGetAttribute_MEMORY_TYPE\": {\"rc\": %d, \"value\": %u}, "
           "\"cuPointerGetAttributes_MEMORY_TYPE\": {\"rc\": %d, \"value\": %u}, "
           "\"cudaHostGetFlags\": {\"rc\": %d, \"flags\": %u}, "
           "\"cudaHostGetDevicePointer\": {\"rc\": %d}}",
           o->attributes_rc, o->attributes_type, o->attributes_device,
           relation(o->attributes_host, p), relation(o->attributes_device_pointer, p),
           o->get_attribute_rc, o->get_attribute_type, o->get_attributes_rc,
           o->get_attributes_type, o->flags_rc, o->flags, o->device_pointer_rc);
}

/* One call site for every malloc'd buffer, and one for every cudaMallocHost buffer. */
static char *pageable_buffer(void) {
    char *p = (char *)malloc(SIZE);
    if (!p) exit(2);
    return p;
}

static char *pinned_buffer(void) {
    void *p = NULL;
    CUDA_OK(cudaMallocHost(&p, SIZE));
    return (char *)p;
}

int main(void) {
    program_name = "pinned_queries";
    void *device;
    CUDA_OK(cudaMalloc(&device, SIZE));
    char *check = (char *)malloc(SIZE);
    if (!check) return 2;
    struct tally pageable, pinned, through_device_pointer;
    tally_init(&pageable, "malloc_queries");
    tally_init(&pinned, "cudaMallocHost_queries");
    tally_init(&through_device_pointer, "cudaMallocHost_device_pointer_copies");
    struct observed o;
    int same_pointer = -1; /* whether the device pointer is the host pointer (UVA) */

    for (unsigned round = 0; round < ROUNDS; round++) {
        char *p = pageable_buffer();
        for (unsigned i = 0; i < COPIES; i++) {
            fill(p, SIZE, round * COPIES + i, 1);
            CUDA_OK(cudaMemcpy(device, p, SIZE, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(p, device, SIZE, cudaMemcpyDeviceToHost));
        }
        o = query(p);
        tally_check(&pageable, round,
                    o.attributes_rc != cudaSuccess ||
                        o.attributes_type != cudaMemoryTypeUnregistered ||
                        (o.attributes_host != NULL && o.attributes_host != (void *)p) ||
                        o.attributes_device_pointer != NULL);
        tally_check(&pageable, round, o.get_attribute_rc != CUDA_ERROR_INVALID_VALUE);
        tally_check(&pageable, round,
                    o.get_attributes_rc != CUDA_SUCCESS || o.get_attributes_type != 0);
        tally_check(&pageable, round, o.flags_rc == cudaSuccess);
        tally_check(&pageable, round, o.device_pointer_rc == cudaSuccess);
        if (round == ROUNDS - 1) describe("malloc_observed", &o, p);
        free(p);
    }

    for (unsigned round = 0; round < ROUNDS; round++) {
        char *p = pinned_buffer();
        o = query(p);
        tally_check(&pinned, round,
                    o.attributes_rc != cudaSuccess || o.attributes_type != cudaMemoryTypeHost ||
                        o.attributes_host != (void *)p);
        tally_check(&pinned, round,
                    o.get_attribute_rc != CUDA_SUCCESS || o.get_attribute_type != 1);
        tally_check(&pinned, round,
                    o.get_attributes_rc != CUDA_SUCCESS || o.get_attributes_type != 1);
        tally_check(&pinned, round, o.flags_rc != cudaSuccess);
        tally_check(&pinned, round, o.device_pointer_rc != cudaSuccess || !o.device_pointer);
        if (o.device_pointer_rc == cudaSuccess && o.device_pointer) {
            same_pointer = o.device_pointer == (void *)p;
            /* Written on the host, read by the device through the device pointer. */
            fill(p, SIZE, round, 2);
            CUDA_OK(cudaMemcpy(device, o.device_pointer, SIZE, cudaMemcpyDeviceToDevice));
            CUDA_OK(cudaMemcpy(check, device, SIZE, cudaMemcpyDeviceToHost));
            tally_check(&through_device_pointer, round, count_wrong(check, SIZE, round, 2));
        }
        if (round == ROUNDS - 1) describe("cudaMallocHost_observed", &o, p);
        CUDA_OK(cudaFreeHost(p));
    }
    detail("cudaMallocHost_device_pointer_equals_host_pointer", "%d", same_pointer);
    tally_detail(&pageable);
    tally_detail(&pinned);
    tally_detail(&through_device_pointer);
    CUDA_OK(cudaFree(device));
    free(check);
    return report();
}
