//===- VecMathBench.cpp - ns per element of VecMath's kernels -------------===//
//
// tessera-vecmath-bench [N] [REPS]: for every instruction-set copy of
// runtime/backends/cpu/VecMath.h this CPU can run (scalar: the C library's
// functions one element at a time, what the CPU kernels did before SLEEF;
// avx2; avx512), the best-of-REPS time per element of each kernel over N
// contiguous f32 elements (default 131072, 512 KiB per array: the size of
// the example GPT's GELU input; pin with taskset -c 0). Row kernels run on
// rows of 256 (softmax, cross-entropy's log-sum-exp) or 64 (norms).
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cpu/VecMathTable.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

using tessera::runtime::vecmath::detail::Table;
namespace detail = tessera::runtime::vecmath::detail;

namespace {

double bestNsPerElem(int64_t n, int reps, const std::function<void()> &f) {
  f(); // warm caches and page tables
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(
        best, std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
  }
  return best;
}

} // namespace

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? std::atoll(argv[1]) : 131072;
  int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  std::vector<Table> tables{detail::scalarTable()};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    tables.push_back(detail::avx2Table());
  if (__builtin_cpu_supports("avx512f"))
    tables.push_back(detail::avx512Table());
#endif
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-4, 4);
  std::vector<float> x(n), dy(n), y(n), g(256, 1.0f), b(256, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = dist(gen);
    dy[i] = dist(gen);
  }
  std::vector<double> dg(256), db(256);
  struct Kernel {
    const char *name;
    std::function<void(const Table &)> run;
  };
  volatile double sink = 0;
  auto rows = [&](int64_t cols, const std::function<void(int64_t)> &row) {
    for (int64_t r = 0; r + cols <= n; r += cols)
      row(r);
  };
  std::vector<Kernel> kernels{
      {"exp", [&](const Table &t) { t.exp(x.data(), y.data(), n); }},
      {"tanh", [&](const Table &t) { t.tanh(x.data(), y.data(), n); }},
      {"erf", [&](const Table &t) { t.erf(x.data(), y.data(), n); }},
      {"sigmoid", [&](const Table &t) { t.sigmoid(x.data(), y.data(), n); }},
      {"silu", [&](const Table &t) { t.silu(x.data(), y.data(), n); }},
      {"gelu (erf)", [&](const Table &t) { t.geluErf(x.data(), y.data(), n); }},
      {"gelu (tanh)",
       [&](const Table &t) { t.geluTanh(x.data(), y.data(), n); }},
      {"gelu_grad (erf)",
       [&](const Table &t) {
         t.geluErfGrad(x.data(), dy.data(), y.data(), n);
       }},
      {"gelu_grad (tanh)",
       [&](const Table &t) {
         t.geluTanhGrad(x.data(), dy.data(), y.data(), n);
       }},
      {"silu_grad",
       [&](const Table &t) { t.siluGrad(x.data(), dy.data(), y.data(), n); }},
      {"softmax rows 256",
       [&](const Table &t) {
         rows(256, [&](int64_t r) {
           t.softmaxRow(x.data() + r, y.data() + r, 256);
         });
       }},
      {"softmax_grad rows 256",
       [&](const Table &t) {
         rows(256, [&](int64_t r) {
           t.softmaxGradRow(x.data() + r, dy.data() + r, y.data() + r, 256);
         });
       }},
      {"log-sum-exp rows 256",
       [&](const Table &t) {
         float m;
         rows(256, [&](int64_t r) {
           sink = sink + t.logSumExp(x.data() + r, 256, m);
         });
       }},
      {"layer_norm rows 64",
       [&](const Table &t) {
         rows(64, [&](int64_t r) {
           double mean, rstd;
           t.rowMeanRstd(x.data() + r, 64, 1e-5f, mean, rstd);
           t.normalizeRow(x.data() + r, (float)mean, (float)rstd, g.data(),
                          b.data(), y.data() + r, 64);
         });
       }},
      {"layer_norm_grad rows 64",
       [&](const Table &t) {
         rows(64, [&](int64_t r) {
           double mean, rstd;
           t.rowMeanRstd(x.data() + r, 64, 1e-5f, mean, rstd);
           t.layerNormGradRow(x.data() + r, g.data(), dy.data() + r, mean, rstd,
                              y.data() + r, dg.data(), db.data(), 64);
         });
       }},
  };
  std::printf("ns per element, N = %lld, best of %d\n", (long long)n, reps);
  std::printf("%-24s", "kernel");
  for (const Table &t : tables)
    std::printf(" %9s", t.name);
  std::printf("\n");
  for (const Kernel &k : kernels) {
    std::printf("%-24s", k.name);
    for (const Table &t : tables)
      std::printf(" %9.3f", bestNsPerElem(n, reps, [&] { k.run(t); }));
    std::printf("\n");
  }
  return 0;
}
