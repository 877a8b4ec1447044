//===- CudaBackend.h - the "cuda" backend of the executor -------*- C++ -*-===//
//
// The CUDA backend as one library (TesseraCudaBackend): device memory of
// one GPU per rank, cuBLASLt GEMMs and the kernels of this folder queued on
// one compute stream, bound from each validated KernelDesc through a
// dispatch table indexed by KernelKind, and collectives through NCCL or
// host staging over MPI (docs/CudaBackend.md). Built when nvcc is found at
// configure time; the executor finds it through its registry
// (runtime/executor/BackendRegistry.h): registerCudaBackend is called by the
// registration file CMake generates when this library is built.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CUDA_CUDABACKEND_H
#define TESSERA_RUNTIME_BACKENDS_CUDA_CUDABACKEND_H

#include "runtime/executor/BackendRegistry.h"

namespace tessera {
namespace runtime {
namespace cuda {

/// Adds the "cuda" backend to `registry`: its factory (errors: no usable
/// device, with the driver's reason; Nccl with two ranks of one node on one
/// device) and the kernel kinds it binds (known without a device).
void registerCudaBackend(exec::BackendRegistry &registry);

} // namespace cuda
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_BACKENDS_CUDA_CUDABACKEND_H
