//===- TsrtDialect.h - Tessera runtime-program dialect ----------*- C++ -*-===//

#ifndef TESSERA_DIALECTS_TSRT_TSRTDIALECT_H
#define TESSERA_DIALECTS_TSRT_TSRTDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/tsrt/TsrtDialect.h.inc"

#define GET_OP_CLASSES
#include "dialects/tsrt/TsrtOps.h.inc"

#include "common/schedule/PipelineSchedule.h"

namespace tessera::tsrt {
/// True for the `tsrt.kernel` names that move elements without arithmetic
/// (reshape, transpose, slice, concat, broadcast, select, gather, convert):
/// the runtime runs them natively on 16-bit floats, while every other kernel
/// on bf16/f16 data computes through f32 copies (a workspace the memory
/// plan counts).
bool isDataMovementKernel(llvm::StringRef kernel);

/// f64 scratch values per logits row that a vocab-parallel `cross_entropy`
/// (3: row max, sum of exponentials, target logit) or `cross_entropy_grad`
/// (2: row max, sum of exponentials) kernel, i.e. one with `grid_axes`,
/// holds while it runs. The runtime allocates them as one counted heap
/// tensor (N · k · 8 bytes) and the memory plan counts it as that
/// instruction's workspace. 0 for every other kernel.
inline int64_t vocabParallelScratchPerRow(llvm::StringRef kernel) {
  if (kernel == "cross_entropy")
    return 3;
  if (kernel == "cross_entropy_grad")
    return 2;
  return 0;
}

/// Every chunk's `tsrt.send` / `tsrt.recv` in program order, forward and
/// backward functions apart (index = chunk), as the schedule's verifier sees
/// them; feeds schedule::verify and schedule::simulate. Fails, with an error
/// on the op at fault, when a chunk's function is missing, a send/recv names
/// its own or an out-of-range chunk, or a channel has two sends or two recvs.
mlir::FailureOr<std::vector<schedule::ChunkComms>>
collectChunkComms(PipelineScheduleOp op,
                  mlir::SymbolTableCollection &symbolTable);

/// The schedule's bubble (idle share of the step's forward/backward phase,
/// mean over stages) simulated by schedule::simulate with each chunk's
/// `flops` as its cost, split 1 : 2 between forward and backward, and free
/// communication. Unlike the closed form (P − 1)/(V·M + P − 1) it counts
/// unequal stages. Fails (no error emitted) when the op has no `flops` or
/// its functions cannot be read; call on a verified op.
mlir::FailureOr<double> simulatedBubble(PipelineScheduleOp op);
} // namespace tessera::tsrt

#endif // TESSERA_DIALECTS_TSRT_TSRTDIALECT_H
