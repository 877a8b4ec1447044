//===- LrSchedule.cpp - learning-rate schedules ---------------------------===//

#include "runtime/trainer/LrSchedule.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>
#include <string>

using namespace tessera::runtime;

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// A learning rate as a user would write it (%g: "0.001", "3e-05").
static std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

static constexpr LrDecayStyle kDecayStyles[] = {
    LrDecayStyle::Constant, LrDecayStyle::Linear, LrDecayStyle::Cosine,
    LrDecayStyle::WSD};
static constexpr WsdDecayStyle kWsdStyles[] = {
    WsdDecayStyle::Linear, WsdDecayStyle::Cosine, WsdDecayStyle::Exponential,
    WsdDecayStyle::MinusSqrt};

llvm::StringRef tessera::runtime::lrDecayStyleName(LrDecayStyle style) {
  switch (style) {
  case LrDecayStyle::Constant:
    return "constant";
  case LrDecayStyle::Linear:
    return "linear";
  case LrDecayStyle::Cosine:
    return "cosine";
  case LrDecayStyle::WSD:
    return "WSD";
  }
  return "?";
}

llvm::StringRef tessera::runtime::wsdDecayStyleName(WsdDecayStyle style) {
  switch (style) {
  case WsdDecayStyle::Linear:
    return "linear";
  case WsdDecayStyle::Cosine:
    return "cosine";
  case WsdDecayStyle::Exponential:
    return "exponential";
  case WsdDecayStyle::MinusSqrt:
    return "minus_sqrt";
  }
  return "?";
}

llvm::Expected<LrDecayStyle>
tessera::runtime::parseLrDecayStyle(llvm::StringRef s) {
  for (LrDecayStyle style : kDecayStyles)
    if (s == lrDecayStyleName(style))
      return style;
  return fail("--lr-decay-style: unknown style '" + s +
              "' (expected constant, linear, cosine or WSD)");
}

llvm::Expected<WsdDecayStyle>
tessera::runtime::parseWsdDecayStyle(llvm::StringRef s) {
  for (WsdDecayStyle style : kWsdStyles)
    if (s == wsdDecayStyleName(style))
      return style;
  return fail("--lr-wsd-decay-style: unknown style '" + s +
              "' (expected linear, cosine, exponential or minus_sqrt)");
}

llvm::Expected<LrSchedule>
LrSchedule::create(const LrScheduleOptions &options) {
  const LrScheduleOptions &o = options;
  if (!std::isfinite(o.lr) || o.lr < 0)
    return fail("--lr must be >= 0, got " + num(o.lr));
  if (!std::isfinite(o.minLr) || o.minLr < 0)
    return fail("--min-lr must be >= 0, got " + num(o.minLr));
  if (o.minLr > o.lr)
    return fail("--min-lr " + num(o.minLr) + " is above --lr " + num(o.lr));
  if (!std::isfinite(o.warmupInit) || o.warmupInit < 0 || o.warmupInit > o.lr)
    return fail("--lr-warmup-init must be in [0, --lr " + num(o.lr) +
                "], got " + num(o.warmupInit));
  if (o.warmupIters < 0)
    return fail(llvm::formatv("--lr-warmup-iters must be >= 0, got {0}",
                              o.warmupIters));
  if (o.decayStyle == LrDecayStyle::Constant)
    return LrSchedule(o);
  if (o.decayIters <= o.warmupIters)
    return fail(llvm::formatv("--lr-decay-style {0} needs --lr-decay-iters "
                              "({1}) above --lr-warmup-iters ({2})",
                              lrDecayStyleName(o.decayStyle), o.decayIters,
                              o.warmupIters));
  if (o.decayStyle == LrDecayStyle::WSD &&
      (o.wsdDecayIters <= 0 || o.wsdDecayIters > o.decayIters - o.warmupIters))
    return fail(llvm::formatv("--lr-decay-style WSD needs --lr-wsd-decay-iters "
                              "in [1, --lr-decay-iters − --lr-warmup-iters = "
                              "{0}], got {1}",
                              o.decayIters - o.warmupIters, o.wsdDecayIters));
  return LrSchedule(o);
}

double LrSchedule::lr(int64_t step) const {
  const LrScheduleOptions &o = opts;
  double k = static_cast<double>(step);
  double peak = o.lr, floor = o.minLr;
  // Megatron: `if lr_warmup_steps > 0 and num_steps <= lr_warmup_steps`.
  if (o.warmupIters > 0 && step <= o.warmupIters)
    return o.warmupInit +
           (peak - o.warmupInit) * k / static_cast<double>(o.warmupIters);
  if (o.decayStyle == LrDecayStyle::Constant)
    return peak;
  if (step > o.decayIters)
    return floor;
  double ratio = (k - static_cast<double>(o.warmupIters)) /
                 static_cast<double>(o.decayIters - o.warmupIters);
  double coeff = 1;
  switch (o.decayStyle) {
  case LrDecayStyle::Constant:
    break;
  case LrDecayStyle::Linear:
    coeff = 1.0 - ratio;
    break;
  case LrDecayStyle::Cosine:
    coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0);
    break;
  case LrDecayStyle::WSD: {
    int64_t annealStart = o.decayIters - o.wsdDecayIters;
    if (step <= annealStart)
      break;
    double q = static_cast<double>(step - annealStart) /
               static_cast<double>(o.wsdDecayIters);
    switch (o.wsdDecayStyle) {
    case WsdDecayStyle::Linear:
      coeff = 1.0 - q;
      break;
    case WsdDecayStyle::Cosine:
      coeff = 0.5 * (std::cos(M_PI * q) + 1.0);
      break;
    case WsdDecayStyle::Exponential:
      coeff = 2.0 * std::pow(0.5, q) - 1.0;
      break;
    case WsdDecayStyle::MinusSqrt:
      coeff = 1.0 - std::sqrt(q);
      break;
    }
    break;
  }
  }
  return floor + coeff * (peak - floor);
}
