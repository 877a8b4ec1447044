//===- Plan.cpp - the parallel plan ---------------------------------------===//

#include "compiler/planner/Plan.h"

using namespace tessera::planner;

llvm::Error Plan::validate() const {
  auto fail = [](const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
  };
  if (dp < 1)
    return fail("--dp must be >= 1, got " + llvm::Twine(dp));
  if (tp < 1)
    return fail("--tp must be >= 1, got " + llvm::Twine(tp));
  if (optimizer.name != "sgd" && optimizer.name != "adamw")
    return fail("--optimizer must be sgd or adamw, got '" + optimizer.name +
                "'");
  if (optimizer.lr < 0)
    return fail("--lr must be >= 0");
  if (optimizer.beta1 < 0 || optimizer.beta1 >= 1 || optimizer.beta2 < 0 ||
      optimizer.beta2 >= 1)
    return fail("--beta1 and --beta2 must be in [0, 1)");
  if (optimizer.eps <= 0)
    return fail("--eps must be > 0");
  return llvm::Error::success();
}

llvm::json::Object Plan::toJSON() const {
  llvm::json::Array axes, shape;
  for (const std::string &name : gridAxisNames())
    axes.push_back(name);
  for (int64_t size : gridShape())
    shape.push_back(size);
  llvm::json::Object opt{{"name", optimizer.name},
                         {"lr", optimizer.lr},
                         {"weight_decay", optimizer.effectiveWeightDecay()}};
  if (optimizer.name == "adamw") {
    opt["beta1"] = optimizer.beta1;
    opt["beta2"] = optimizer.beta2;
    opt["eps"] = optimizer.eps;
  }
  return llvm::json::Object{
      {"grid", llvm::json::Object{{"axes", std::move(axes)},
                                  {"shape", std::move(shape)}}},
      {"ranks", numRanks()},
      {"optimizer", std::move(opt)}};
}
