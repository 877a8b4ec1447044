//===- LrSchedule.h - learning-rate schedules -------------------*- C++ -*-===//
//
// The learning rate of each training step, with the semantics of Megatron-LM's
// OptimizerParamScheduler (megatron/core/optimizer_param_scheduler.py) and its
// flag names (--lr, --min-lr, --lr-warmup-init, --lr-warmup-iters,
// --lr-decay-style, --lr-decay-iters, --lr-wsd-decay-style,
// --lr-wsd-decay-iters). Pure: no MPI, no executor.
//
// For step k (0-based: the number of optimizer steps completed before it;
// the value torch.optim.lr_scheduler's last_epoch has when the step runs),
// with peak P = lr, floor m = min_lr, I = warmup_init, W = warmup_iters,
// D = decay_iters:
//   W > 0 and k <= W:       lr = I + (P − I)·k/W          (linear warmup)
//   style constant:         lr = P
//   k > D:                  lr = m
//   otherwise, with r = (k − W)/(D − W) in [0, 1]:
//     linear                lr = m + (P − m)·(1 − r)
//     cosine                lr = m + (P − m)·(1 + cos(π·r))/2
//     WSD (warmup-stable-decay, Hu et al. 2024, "MiniCPM: Unveiling the
//     Potential of Small Language Models with Scalable Training
//     Strategies"), with A = wsd_decay_iters: coefficient 1 while
//     k <= D − A, then with q = (k − (D − A))/A:
//       linear 1 − q; cosine (1 + cos(π·q))/2; exponential 2·0.5^q − 1;
//       minus_sqrt 1 − sqrt(q);  lr = m + (P − m)·coefficient.
// The warmup equals torch.optim.lr_scheduler.LinearLR(start_factor = I/P,
// end_factor = 1, total_iters = W) step for step (Megatron's default I = 0
// is LinearLR's start_factor → 0, which torch's chained form cannot take);
// linear decay equals LinearLR(1, m/P, D − W) and cosine decay
// CosineAnnealingLR(T_max = D − W, eta_min = m), each started at step W
// (SequentialLR with milestone W) and, past D, held at m as Megatron does.
//
// Units: learning rates in the optimizer's units (torch.optim's lr), steps
// in optimizer steps (Megatron's iterations, not samples).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_TRAINER_LRSCHEDULE_H
#define TESSERA_RUNTIME_TRAINER_LRSCHEDULE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace tessera::runtime {

/// --lr-decay-style (Megatron's choices; "inverse-square-root" is not
/// supported).
enum class LrDecayStyle { Constant, Linear, Cosine, WSD };
/// --lr-wsd-decay-style.
enum class WsdDecayStyle { Linear, Cosine, Exponential, MinusSqrt };

/// The schedule's parameters (Megatron-LM's flags; tessera-run's defaults).
struct LrScheduleOptions {
  double lr = 1e-3;        ///< --lr: the peak (tessera-run: the manifest's)
  double minLr = 0;        ///< --min-lr: the floor after decay
  double warmupInit = 0;   ///< --lr-warmup-init: the lr of step 0 in warmup
  int64_t warmupIters = 0; ///< --lr-warmup-iters (0: no warmup)
  /// --lr-decay-style. Megatron's default is linear; Tessera keeps a
  /// constant learning rate unless a decay style is asked for.
  LrDecayStyle decayStyle = LrDecayStyle::Constant;
  int64_t decayIters = 0; ///< --lr-decay-iters (tessera-run: default --steps)
  int64_t wsdDecayIters = 0; ///< --lr-wsd-decay-iters (WSD: required, > 0)
  /// --lr-wsd-decay-style (Megatron's default: exponential).
  WsdDecayStyle wsdDecayStyle = WsdDecayStyle::Exponential;
};

/// "constant", "linear", "cosine", "WSD" (Megatron's spelling) and back.
llvm::Expected<LrDecayStyle> parseLrDecayStyle(llvm::StringRef s);
llvm::StringRef lrDecayStyleName(LrDecayStyle style);
/// "linear", "cosine", "exponential", "minus_sqrt" and back.
llvm::Expected<WsdDecayStyle> parseWsdDecayStyle(llvm::StringRef s);
llvm::StringRef wsdDecayStyleName(WsdDecayStyle style);

class LrSchedule {
public:
  /// Checks the options as Megatron's OptimizerParamScheduler asserts them:
  /// 0 <= min_lr <= lr, 0 <= warmup_init <= lr, warmup_iters >= 0; a
  /// decaying style needs warmup_iters < decay_iters; WSD needs
  /// 0 < wsd_decay_iters <= decay_iters − warmup_iters. Errors are one line
  /// naming the flag ("--min-lr 0.1 is above --lr 0.01").
  static llvm::Expected<LrSchedule> create(const LrScheduleOptions &options);

  /// The learning rate of step `step` (>= 0; see the file comment).
  double lr(int64_t step) const;

  const LrScheduleOptions &options() const { return opts; }

private:
  explicit LrSchedule(const LrScheduleOptions &options) : opts(options) {}
  LrScheduleOptions opts;
};

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_TRAINER_LRSCHEDULE_H
