/* The CUDA runtime and driver API these programs use, declared as CUDA 12/13's headers declare
 * them (names, signatures, enum values), so that the programs build without a CUDA toolkit
 * against any libcudart.so.13 / libcuda.so.1. Built by nvcc (-x cu), the real headers are
 * used instead. */
#ifndef TRANSPARENCY_CUDA_DECLS_H
#define TRANSPARENCY_CUDA_DECLS_H

#if defined(__CUDACC__) || defined(TRANSPARENCY_REAL_CUDA_HEADERS)
#include <cuda.h>
#include <cuda_runtime.h>
#else
#include <stddef.h>

/* ---- runtime (cuda_runtime_api.h, driver_types.h) ---- */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorHostMemoryNotRegistered = 713,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3,
};

struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
};

#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostRegisterDefault 0x00

typedef struct CUstream_st *cudaStream_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef void (*cudaHostFn_t)(void *userData);

extern cudaError_t cudaMalloc(void **devPtr, size_t size);
extern cudaError_t cudaFree(void *devPtr);
extern cudaError_t cudaMallocHost(void **ptr, size_t size);
extern cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
extern cudaError_t cudaFreeHost(void *ptr);
extern cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags);
extern cudaError_t cudaHostUnregister(void *ptr);
extern cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost);
extern cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags);
extern cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                            const void *ptr);
extern cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                              enum cudaMemcpyKind kind);
extern cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                   enum cudaMemcpyKind kind, cudaStream_t stream);
extern cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                size_t width, size_t height, enum cudaMemcpyKind kind);
extern cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                     size_t width, size_t height, enum cudaMemcpyKind kind,
                                     cudaStream_t stream);
extern cudaError_t cudaStreamCreate(cudaStream_t *pStream);
extern cudaError_t cudaStreamDestroy(cudaStream_t stream);
extern cudaError_t cudaStreamSynchronize(cudaStream_t stream);
extern cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData);
extern cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode);
extern cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph);
extern cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                        unsigned long long flags);
extern cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
extern cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);
extern cudaError_t cudaGraphDestroy(cudaGraph_t graph);
extern cudaError_t cudaGetLastError(void);

/* ---- driver (cuda.h) ---- */
typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
} CUresult;

typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;

typedef enum CUpointer_attribute_enum {
    CU_POINTER_ATTRIBUTE_CONTEXT = 1,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
    CU_POINTER_ATTRIBUTE_HOST_POINTER = 4,
} CUpointer_attribute;

extern CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                     size_t ByteCount, CUstream hStream);
extern CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                     CUstream hStream);
extern CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                      CUdeviceptr ptr);
extern CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                       CUpointer_attribute *attributes, void **data,
                                       CUdeviceptr ptr);
#endif

#endif
