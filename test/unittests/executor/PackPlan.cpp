//===- PackPlan.cpp - build plan.tsr artifacts for tests ------------------===//

#include "PackPlan.h"

#include "dialects/tsrt/TsrtDialect.h"
#include "runtime/checkpoint/SafeTensors.h"

#include "mlir/Bytecode/BytecodeWriter.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <random>

using namespace tessera::runtime;

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

Tensor test::defaultInitialValue(llvm::StringRef name,
                                 std::vector<int64_t> shape) {
  uint32_t seed = 2166136261u; // FNV-1a: the same on every platform
  for (char c : name)
    seed = (seed ^ static_cast<unsigned char>(c)) * 16777619u;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = dist(gen);
  return t;
}

llvm::Expected<std::string>
test::packPlan(llvm::StringRef mlirText, const llvm::json::Object &manifest,
               const std::map<std::string, Tensor> &weights,
               llvm::StringRef sourceName, bool verify) {
  mlir::DialectRegistry registry;
  registry.insert<tessera::tsrt::TsrtDialect, mlir::func::FuncDialect>();
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  ctx.allowUnregisteredDialects(); // lets tests pack ops the runtime rejects
  std::string diag;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    std::string loc;
    llvm::raw_string_ostream os(loc);
    d.getLocation().print(os);
    diag += loc + ": " + d.str() + "\n";
    return mlir::success();
  });
  mlir::ParserConfig config(&ctx, /*verifyAfterParse=*/verify);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(mlirText, config, sourceName);
  if (!module)
    return fail("cannot parse the program:\n" + diag);
  std::string bytecode;
  llvm::raw_string_ostream bos(bytecode);
  if (mlir::failed(mlir::writeBytecodeToFile(*module, bos)))
    return fail("cannot write bytecode");
  bos.flush();

  std::string programName = "__program__";
  if (auto p = manifest.getString("program"))
    programName = p->str();

  std::vector<std::string> names;
  std::vector<Tensor> tensors;
  if (const llvm::json::Array *args = manifest.getArray("arguments"))
    for (const llvm::json::Value &v : *args) {
      const llvm::json::Object *a = v.getAsObject();
      if (!a)
        continue;
      llvm::StringRef role = a->getString("role").value_or("");
      if (role != "param" && role != "frozen")
        continue;
      std::string name = a->getString("name").value_or("").str();
      auto it = weights.find(name);
      if (it != weights.end()) {
        tensors.push_back(it->second);
      } else {
        std::vector<int64_t> shape;
        if (const llvm::json::Array *s = a->getArray("shape"))
          for (const llvm::json::Value &d : *s)
            shape.push_back(d.getAsInteger().value_or(0));
        tensors.push_back(defaultInitialValue(name, shape));
      }
      names.push_back(name);
    }
  std::string manifestText;
  llvm::raw_string_ostream ms(manifestText);
  ms << llvm::json::Value(llvm::json::Object(manifest));
  ms.flush();

  // The program is stored as raw U8 bytes (not BOOL normalised to 0/1,
  // which would destroy the bytecode); writeSafeTensors adds the section
  // digests the runtime requires.
  for (size_t i = 0; i < names.size(); ++i)
    if (tensors[i].dtype() != DType::F32)
      return fail("initial value of '" + names[i] + "' must be f32");
  Tensor program =
      Tensor::empty(DType::I1, {static_cast<int64_t>(bytecode.size())});
  if (!bytecode.empty())
    std::memcpy(program.raw(), bytecode.data(), bytecode.size());
  std::vector<NamedTensor> named;
  for (size_t i = 0; i < names.size(); ++i)
    named.emplace_back(names[i], &tensors[i]);
  named.emplace_back(programName, &program);
  std::string out;
  llvm::raw_string_ostream os(out);
  if (llvm::Error err = writeSafeTensors(
          os, named, {{"tessera.manifest", manifestText}}, {programName}))
    return fail(llvm::toString(std::move(err)));
  os.flush();
  return out;
}
