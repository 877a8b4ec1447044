//===- CpuBackend.h - the "cpu" backend of the executor ---------*- C++ -*-===//
//
// The CPU backend as one library (TesseraCpuBackend): host memory, the
// kernels of this folder (CpuKernels.h, Attention.h; OpenBLAS GEMMs) bound
// from each validated KernelDesc through a dispatch table indexed by
// KernelKind, and collectives as MPI closures over host tensors
// (runtime/collectives/mpi). Every plan runs on it; it is what a null
// backend means (exec::cpuBackend()).
//
// The executor finds it through its registry (runtime/executor/
// BackendRegistry.h): registerCpuBackend is called by the registration file
// CMake generates for the backends that are built. The binders are also
// exported for backends that run a kernel on host copies (the CUDA
// backend's ring attention) and for test backends.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CPU_CPUBACKEND_H
#define TESSERA_RUNTIME_BACKENDS_CPU_CPUBACKEND_H

#include "runtime/executor/Backend.h"
#include "runtime/executor/BackendRegistry.h"
#include "runtime/executor/KernelDesc.h"

namespace tessera {
namespace runtime {
namespace cpu {

/// Adds the "cpu" backend (factory and bound kernel kinds) to `registry`.
/// Its factory refuses the Nccl transport ("--collectives nccl needs
/// --backend cuda ...").
void registerCpuBackend(exec::BackendRegistry &registry);

/// Binds `kernel` (validated by exec::decodeKernel) to its CPU kernel on
/// host tensors: fills `inst.fn` and `inst.allocateResults`. A widened
/// kernel (16-bit operands or results) runs its f32 kernel between
/// conversions. Kernels with grid_axes communicate over MPI on
/// ctx.comms[kernel.commIndex]. Error (without location): the kernel kind
/// has no CPU kernel, or no bf16/f16 form.
llvm::Error bindKernel(const exec::KernelDesc &kernel, exec::Instruction &inst);

/// Binds collective `spec` (checked by exec::checkCollective) to the MPI
/// collective of runtime/collectives/mpi on host tensors.
llvm::Error bindCollective(const exec::CollectiveSpec &spec,
                           exec::Instruction &inst);

} // namespace cpu
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_BACKENDS_CPU_CPUBACKEND_H
