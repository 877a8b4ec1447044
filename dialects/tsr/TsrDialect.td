//===- TsrDialect.td - Tessera tensor dialect --------------*- tablegen -*-===//
//
// The `tsr` dialect: statically shaped tensor ops of a transformer's forward,
// backward and optimizer step. Every op answers the facts other passes need
// through interfaces (TsrInterfaces.td): its gradient, its sharding rule and
// its cost. No pass switches on op names.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TSR_DIALECT
#define TESSERA_TSR_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Tsr_Dialect : Dialect {
  let name = "tsr";
  let cppNamespace = "::tessera::tsr";
  let summary = "Tessera's tensor-level ops for transformer training.";
  let description = [{
    All tensors are ranked and statically shaped (`tensor<8x64xf32>`). Token
    ids are `i64`, masks `i1`, activations and parameters `f32`, or `bf16`
    / `f16` inside the step after `tsr-mixed-precision` (parameters and
    optimizer state stay `f32` at the step's boundary). Broadcasting is
    never implicit: elementwise ops take operands of one shape and the
    importer makes broadcasts explicit with `tsr.broadcast`, so gradients
    and sharding rules see every broadcast.

    Phase invariants:
    - after import: `func.func @forward` only, no `tsr.*_grad` or optimizer ops;
    - after `tsr-build-train-step`: `func.func @train_step`;
    - after `tsr-sharding-partition`: local shapes, no `tsr.sharding`
      attributes remain, collectives are `shard` ops.
  }];
  // The discardable attributes Tessera's passes put on ops, functions'
  // arguments and results and the module, declared once: ODS generates a
  // typed helper per attribute (TsrDialect::RoleAttrHelper, ...; its
  // getNameStr() is the name), and dialects/tsr/DiscardableAttrs.h names
  // them (kRoleAttrName, ...) and reads them on function arguments and
  // results. The runtime never sees them: tsr-lower-to-runtime renames
  // `tsr.role`/`tsr.name` to `tsrt.*` and drops the others.
  //   tsr.role          arg/result: "param", "frozen", "input", "tokens",
  //                     "labels", "opt_state", "loss", ... (importer,
  //                     tsr-build-train-step)
  //   tsr.name          arg/result: the ONNX tensor's name
  //   tsr.init          arg: the initial value (the ONNX initializer)
  //   tsr.weights       module: "absent" for a weight-free import
  //   tsr.grid_axes     module: the grid's axis names (dp, tp, pp, ...)
  //   tsr.fwd, tsr.bwd  op: the forward op's id; a backward op carries the
  //                     id of the forward op it differentiates (autodiff)
  //   tsr.sharding      arg/result: the value's sharding (annotate)
  //   tsr.shardings     op: its results' shardings (propagate, until
  //                     partition)
  //   tsr.vocab_parallel arg: the embedding is split over the vocabulary
  //   tsr.zero_replicated func: parameters ZeRO leaves replicated
  //   tsr.trace         op: a stable id of the op in @train_step's program
  //                     order (tsr-trace-values; tessera-check matches the
  //                     serial and the partitioned run's values by it);
  //                     lowered to `tsrt.trace` on the tsrt.kernel
  //   tsr.trace_shardings op: with tsr.trace, the layout (#tsr.sharding, one
  //                     per result) its local results have after
  //                     tsr-sharding-partition and tsr-zero-sharding
  //   tsr.sharding_search module: what tsr-sharding-annotate's sharding
  //                     search predicted (layers, distinct layers, tp bytes
  //                     per rank, and per collective its
  //                     layer, kind, direction, tensor and bytes), printed by
  //                     tessera-partition --explain
  let discardableAttrs = (ins
    "::mlir::StringAttr":$role,
    "::mlir::StringAttr":$name,
    "::mlir::ElementsAttr":$init,
    "::mlir::StringAttr":$weights,
    "::mlir::ArrayAttr":$grid_axes,
    "::mlir::IntegerAttr":$fwd,
    "::mlir::IntegerAttr":$bwd,
    "::tessera::tsr::ShardingAttr":$sharding,
    "::mlir::ArrayAttr":$shardings,
    "::mlir::UnitAttr":$vocab_parallel,
    "::mlir::ArrayAttr":$zero_replicated,
    "::mlir::IntegerAttr":$trace,
    "::mlir::ArrayAttr":$trace_shardings,
    "::mlir::DictionaryAttr":$sharding_search
  );
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

class Tsr_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tsr_Dialect, mnemonic, traits>;

#endif // TESSERA_TSR_DIALECT
