//===- LrScheduleTest.cpp - learning-rate schedules -----------------------===//
//
// runtime/trainer/LrSchedule.h against the formulas of Megatron-LM's
// OptimizerParamScheduler.get_lr, evaluated by hand at chosen steps, and
// against the closed forms of torch.optim.lr_scheduler's LinearLR and
// CosineAnnealingLR; the option checks (one-line errors naming the flag).
//
//===----------------------------------------------------------------------===//

#include "runtime/trainer/LrSchedule.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace tessera::runtime;

namespace {

LrSchedule make(const LrScheduleOptions &o) {
  llvm::Expected<LrSchedule> s = LrSchedule::create(o);
  EXPECT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  return *s;
}

std::string error(const LrScheduleOptions &o) {
  llvm::Expected<LrSchedule> s = LrSchedule::create(o);
  return s ? std::string() : llvm::toString(s.takeError());
}

TEST(LrSchedule, ConstantIsThePeakForEveryStep) {
  LrScheduleOptions o;
  o.lr = 3e-4;
  LrSchedule s = make(o);
  for (int64_t k : {0, 1, 7, 1000000})
    EXPECT_EQ(s.lr(k), 3e-4) << k;
}

TEST(LrSchedule, LinearWarmupFromZeroAsMegatron) {
  LrScheduleOptions o;
  o.lr = 1e-3;
  o.warmupIters = 4;
  LrSchedule s = make(o);
  // lr·k/W for k <= W (step 0 has lr 0), then the peak.
  EXPECT_EQ(s.lr(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr(1), 2.5e-4);
  EXPECT_DOUBLE_EQ(s.lr(2), 5e-4);
  EXPECT_DOUBLE_EQ(s.lr(4), 1e-3);
  EXPECT_DOUBLE_EQ(s.lr(5), 1e-3);
}

TEST(LrSchedule, WarmupInitIsTorchLinearLRStartFactor) {
  // torch.optim.lr_scheduler.LinearLR(start_factor=f, end_factor=1,
  // total_iters=W), closed form: lr·(f + (1 − f)·min(k, W)/W).
  LrScheduleOptions o;
  o.lr = 3e-3;
  o.warmupIters = 3;
  o.warmupInit = 0.1 * o.lr;
  LrSchedule s = make(o);
  for (int64_t k = 0; k <= 6; ++k) {
    double f = 0.1;
    double torch = o.lr * (f + (1 - f) * std::min<int64_t>(k, 3) / 3.0);
    EXPECT_NEAR(s.lr(k), torch, 1e-15) << k;
  }
}

TEST(LrSchedule, CosineDecayToMinLr) {
  LrScheduleOptions o;
  o.lr = 1e-3;
  o.minLr = 1e-4;
  o.warmupIters = 4;
  o.decayIters = 10;
  o.decayStyle = LrDecayStyle::Cosine;
  LrSchedule s = make(o);
  EXPECT_DOUBLE_EQ(s.lr(4), 1e-3);
  // r = (7 − 4)/(10 − 4) = 0.5: min + (peak − min)·(1 + cos(π/2))/2.
  EXPECT_DOUBLE_EQ(s.lr(7), 1e-4 + 0.9e-3 * 0.5);
  EXPECT_DOUBLE_EQ(s.lr(10), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr(11), 1e-4); // past --lr-decay-iters: min_lr
  EXPECT_DOUBLE_EQ(s.lr(1000), 1e-4);
  // CosineAnnealingLR(T_max = D − W, eta_min = min) started at step W.
  for (int64_t k = 4; k <= 10; ++k) {
    double e = static_cast<double>(k - 4);
    double torch = 1e-4 + (1e-3 - 1e-4) * (1 + std::cos(M_PI * e / 6)) / 2;
    EXPECT_NEAR(s.lr(k), torch, 1e-18) << k;
  }
}

TEST(LrSchedule, LinearDecayToMinLr) {
  LrScheduleOptions o;
  o.lr = 2e-3;
  o.minLr = 2e-4;
  o.warmupIters = 2;
  o.decayIters = 8;
  o.decayStyle = LrDecayStyle::Linear;
  LrSchedule s = make(o);
  EXPECT_DOUBLE_EQ(s.lr(1), 1e-3);
  EXPECT_DOUBLE_EQ(s.lr(5), 2e-4 + 1.8e-3 * 0.5);
  EXPECT_DOUBLE_EQ(s.lr(8), 2e-4);
  EXPECT_DOUBLE_EQ(s.lr(9), 2e-4);
  // LinearLR(start_factor=1, end_factor=min/peak, total_iters=D − W)
  // started at step W.
  for (int64_t k = 2; k <= 12; ++k) {
    double e = std::min<double>(k - 2, 6);
    double torch = 2e-3 * (1 + (0.1 - 1) * e / 6);
    EXPECT_NEAR(s.lr(k), torch, 1e-17) << k;
  }
}

TEST(LrSchedule, NoWarmupDecaysFromStepZero) {
  LrScheduleOptions o;
  o.lr = 1.0;
  o.decayIters = 4;
  o.decayStyle = LrDecayStyle::Linear;
  LrSchedule s = make(o);
  EXPECT_DOUBLE_EQ(s.lr(0), 1.0);
  EXPECT_DOUBLE_EQ(s.lr(1), 0.75);
  EXPECT_DOUBLE_EQ(s.lr(4), 0.0);
}

TEST(LrSchedule, WarmupStableDecay) {
  // WSD (Hu et al. 2024, MiniCPM): W = 2, D = 12, A = 4 decay steps at the
  // end: the peak until step 8, then the decay to min_lr at step 12.
  LrScheduleOptions o;
  o.lr = 1.0;
  o.minLr = 0.1;
  o.warmupIters = 2;
  o.decayIters = 12;
  o.wsdDecayIters = 4;
  o.decayStyle = LrDecayStyle::WSD;
  struct Case {
    WsdDecayStyle style;
    double coeffAtHalf; // the coefficient at q = 0.5 (step 10)
  };
  for (Case c :
       {Case{WsdDecayStyle::Linear, 0.5}, Case{WsdDecayStyle::Cosine, 0.5},
        Case{WsdDecayStyle::Exponential, 2 * std::sqrt(0.5) - 1},
        Case{WsdDecayStyle::MinusSqrt, 1 - std::sqrt(0.5)}}) {
    o.wsdDecayStyle = c.style;
    LrSchedule s = make(o);
    std::string what(wsdDecayStyleName(c.style));
    EXPECT_DOUBLE_EQ(s.lr(1), 0.5) << what;
    EXPECT_DOUBLE_EQ(s.lr(3), 1.0) << what;
    EXPECT_DOUBLE_EQ(s.lr(8), 1.0) << what;
    EXPECT_NEAR(s.lr(10), 0.1 + 0.9 * c.coeffAtHalf, 1e-15) << what;
    EXPECT_NEAR(s.lr(12), 0.1, 1e-15) << what;
    EXPECT_DOUBLE_EQ(s.lr(13), 0.1) << what;
  }
  // Linear at q = 0.25 (step 9) and cosine at q = 0.75 (step 11).
  o.wsdDecayStyle = WsdDecayStyle::Linear;
  EXPECT_DOUBLE_EQ(make(o).lr(9), 0.1 + 0.9 * 0.75);
  o.wsdDecayStyle = WsdDecayStyle::Cosine;
  EXPECT_NEAR(make(o).lr(11), 0.1 + 0.9 * 0.5 * (1 + std::cos(0.75 * M_PI)),
              1e-15);
}

TEST(LrSchedule, StyleNamesRoundTrip) {
  for (llvm::StringRef name : {"constant", "linear", "cosine", "WSD"}) {
    llvm::Expected<LrDecayStyle> style = parseLrDecayStyle(name);
    ASSERT_TRUE(static_cast<bool>(style)) << llvm::toString(style.takeError());
    EXPECT_EQ(lrDecayStyleName(*style), name);
  }
  for (llvm::StringRef name :
       {"linear", "cosine", "exponential", "minus_sqrt"}) {
    llvm::Expected<WsdDecayStyle> style = parseWsdDecayStyle(name);
    ASSERT_TRUE(static_cast<bool>(style)) << llvm::toString(style.takeError());
    EXPECT_EQ(wsdDecayStyleName(*style), name);
  }
  EXPECT_EQ(llvm::toString(parseLrDecayStyle("wsd").takeError()),
            "--lr-decay-style: unknown style 'wsd' (expected constant, "
            "linear, cosine or WSD)");
  EXPECT_EQ(llvm::toString(parseWsdDecayStyle("sqrt").takeError()),
            "--lr-wsd-decay-style: unknown style 'sqrt' (expected linear, "
            "cosine, exponential or minus_sqrt)");
}

TEST(LrSchedule, BadOptionsAreOneLineErrors) {
  LrScheduleOptions o;
  o.lr = 1e-3;
  o.minLr = 1e-2;
  EXPECT_EQ(error(o), "--min-lr 0.01 is above --lr 0.001");
  o = {};
  o.lr = -1;
  EXPECT_EQ(error(o), "--lr must be >= 0, got -1");
  o = {};
  o.minLr = -1e-5;
  EXPECT_EQ(error(o), "--min-lr must be >= 0, got -1e-05");
  o = {};
  o.warmupIters = -2;
  EXPECT_EQ(error(o), "--lr-warmup-iters must be >= 0, got -2");
  o = {};
  o.warmupInit = 1;
  EXPECT_EQ(error(o), "--lr-warmup-init must be in [0, --lr 0.001], got 1");
  o = {};
  o.decayStyle = LrDecayStyle::Cosine;
  o.warmupIters = 8;
  o.decayIters = 8;
  EXPECT_EQ(error(o), "--lr-decay-style cosine needs --lr-decay-iters (8) "
                      "above --lr-warmup-iters (8)");
  o.decayIters = 10;
  EXPECT_EQ(error(o), "");
  o.decayStyle = LrDecayStyle::WSD;
  EXPECT_EQ(error(o), "--lr-decay-style WSD needs --lr-wsd-decay-iters in "
                      "[1, --lr-decay-iters − --lr-warmup-iters = 2], got 0");
  o.wsdDecayIters = 3;
  EXPECT_EQ(error(o), "--lr-decay-style WSD needs --lr-wsd-decay-iters in "
                      "[1, --lr-decay-iters − --lr-warmup-iters = 2], got 3");
  o.wsdDecayIters = 2;
  EXPECT_EQ(error(o), "");
  // A constant schedule ignores the decay flags.
  o = {};
  o.warmupIters = 5;
  EXPECT_EQ(error(o), "");
}

} // namespace
