//===- RefEval.cpp - double-precision reference interpreter of tsr ops ----===//

#include "RefEval.h"

#include "dialects/tsr/TsrOps.h"
#include "test/conformance/Reference.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <numeric>

using namespace mlir;
using namespace tessera;
using tessera::test::RefTensor;

RefTensor::RefTensor(std::vector<int64_t> s, double fill)
    : shape(std::move(s)) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  data.assign(n, fill);
}

std::vector<int64_t>
tessera::test::stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = (int64_t)shape.size() - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

namespace {

using test::stridesOf;

std::vector<int64_t> shapeOf(Type t) {
  auto r = cast<RankedTensorType>(t);
  return std::vector<int64_t>(r.getShape().begin(), r.getShape().end());
}

bool isIntType(Type t) {
  return isa<IntegerType>(cast<RankedTensorType>(t).getElementType());
}

/// Probabilities of scaled dot-product attention in double precision (the
/// reference of tsr.attention / attention_grad). Grouped-query attention:
/// K/V have kvBatch = batch / group rows and query row b uses K/V row
/// b / group (`kv(b)`).
struct AttentionRef {
  const RefTensor &q, &k, &v;
  const RefTensor *mask;
  double scale;
  bool causal;
  int64_t batch, sq, sk, dh, dv, group;

  AttentionRef(const RefTensor &q, const RefTensor &k, const RefTensor &v,
               const RefTensor *mask, double scale, bool causal)
      : q(q), k(k), v(v), mask(mask), scale(scale), causal(causal) {
    size_t r = q.shape.size();
    sq = q.shape[r - 2];
    dh = q.shape[r - 1];
    sk = k.shape[r - 2];
    dv = v.shape[r - 1];
    batch = q.numel() / (sq * dh);
    int64_t kvBatch = sk * dh ? k.numel() / (sk * dh) : batch;
    group = kvBatch ? batch / kvBatch : 1;
  }
  int64_t kv(int64_t b) const { return b / group; }

  /// Fills p with row i of batch b's probabilities; returns its lse.
  double probs(int64_t b, int64_t i, std::vector<double> &p) const {
    p.assign(sk, 0.0);
    std::vector<double> s(sk, -INFINITY);
    double mx = -INFINITY;
    for (int64_t j = 0; j < sk; ++j) {
      if (causal && j > i)
        continue;
      double dot = 0;
      for (int64_t c = 0; c < dh; ++c)
        dot +=
            q.data[(b * sq + i) * dh + c] * k.data[(kv(b) * sk + j) * dh + c];
      s[j] = scale * dot + (mask ? mask->data[i * sk + j] : 0.0);
      mx = std::max(mx, s[j]);
    }
    if (mx == -INFINITY)
      return -INFINITY;
    double sum = 0;
    for (int64_t j = 0; j < sk; ++j)
      sum += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - mx);
    double lse = mx + std::log(sum);
    for (int64_t j = 0; j < sk; ++j)
      p[j] = s[j] == -INFINITY ? 0.0 : std::exp(s[j] - lse);
    return lse;
  }
};

/// Multi-index of flat index `i` in `shape`.
std::vector<int64_t> unflatten(int64_t i, const std::vector<int64_t> &shape) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  return idx;
}

int64_t flatten(const std::vector<int64_t> &idx,
                const std::vector<int64_t> &strides) {
  int64_t f = 0;
  for (size_t d = 0; d < idx.size(); ++d)
    f += idx[d] * strides[d];
  return f;
}

double gelu(double x, bool tanhForm) {
  if (!tanhForm)
    return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double geluDerivative(double x, bool tanhForm) {
  if (!tanhForm) {
    double cdf = 0.5 * (1.0 + std::erf(x / std::sqrt(2.0)));
    double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    return cdf + x * pdf;
  }
  double k = std::sqrt(2.0 / M_PI);
  double inner = k * (x + 0.044715 * x * x * x);
  double t = std::tanh(inner);
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// d/dx x · sigmoid(x) = s · (1 + x · (1 − s)).
double siluDerivative(double x) {
  double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

/// 1 / sqrt(mean(x²) + eps) over `n` values.
double rmsRstd(const double *x, int64_t n, double eps) {
  double ms = 0;
  for (int64_t j = 0; j < n; ++j)
    ms += x[j] * x[j];
  return 1.0 / std::sqrt(ms / n + eps);
}

/// Splits `shape` around `axis` into (outer, size, inner).
void splitAxis(const std::vector<int64_t> &shape, int64_t axis, int64_t &outer,
               int64_t &size, int64_t &inner) {
  outer = 1;
  inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  size = shape[axis];
  for (size_t d = axis + 1; d < shape.size(); ++d)
    inner *= shape[d];
}

struct Interpreter {
  DenseMap<Value, RefTensor> env;
  std::string &error;

  explicit Interpreter(std::string &error) : error(error) {}

  bool fail(Operation *op, const std::string &msg) {
    error = op->getName().getStringRef().str() + ": " + msg;
    return false;
  }
  const RefTensor &in(Operation *op, unsigned i) {
    return env.find(op->getOperand(i))->second;
  }
  void set(Operation *op, unsigned i, RefTensor t) {
    env[op->getResult(i)] = std::move(t);
  }

  template <typename Fn> bool unary(Operation *op, Fn fn) {
    RefTensor out = in(op, 0);
    for (double &v : out.data)
      v = fn(v);
    set(op, 0, std::move(out));
    return true;
  }
  template <typename Fn> bool binary(Operation *op, Fn fn) {
    const RefTensor &a = in(op, 0), &b = in(op, 1);
    if (a.shape != b.shape)
      return fail(op, "operand shapes differ");
    RefTensor out(a.shape);
    for (int64_t i = 0; i < a.numel(); ++i)
      out.data[i] = fn(a.data[i], b.data[i]);
    set(op, 0, std::move(out));
    return true;
  }

  template <typename Fn>
  bool reduce(Operation *op, ArrayRef<int64_t> axes, bool keepdim, double init,
              Fn fn, bool mean) {
    const RefTensor &x = in(op, 0);
    RefTensor out(shapeOf(op->getResult(0).getType()), init);
    std::vector<int64_t> keptShape; // shape over the kept dims
    for (int64_t d = 0; d < x.rank(); ++d)
      if (!llvm::is_contained(axes, d))
        keptShape.push_back(x.shape[d]);
    std::vector<int64_t> kstrides = stridesOf(keptShape);
    int64_t count = 1;
    for (int64_t a : axes)
      count *= x.shape[a];
    for (int64_t i = 0; i < x.numel(); ++i) {
      std::vector<int64_t> idx = unflatten(i, x.shape);
      int64_t o = 0, k = 0;
      for (int64_t d = 0; d < x.rank(); ++d)
        if (!llvm::is_contained(axes, d))
          o += idx[d] * kstrides[k++];
      out.data[o] = fn(out.data[o], x.data[i]);
    }
    if (mean)
      for (double &v : out.data)
        v /= count;
    (void)keepdim; // same flat layout either way
    set(op, 0, std::move(out));
    return true;
  }

  bool matmul(tsr::MatmulOp op) {
    const RefTensor &a = in(op, 0), &b = in(op, 1);
    bool ta = op.getTransposeLhs(), tb = op.getTransposeRhs();
    int64_t ar = a.rank(), br = b.rank();
    int64_t m = ta ? a.shape[ar - 1] : a.shape[ar - 2];
    int64_t k = ta ? a.shape[ar - 2] : a.shape[ar - 1];
    int64_t n = tb ? b.shape[br - 2] : b.shape[br - 1];
    int64_t batch = a.numel() / (m * k);
    bool shared = br == 2 && ar > 2;
    RefTensor out(shapeOf(op.getResult().getType()));
    for (int64_t bi = 0; bi < batch; ++bi) {
      const double *pa = a.data.data() + bi * m * k;
      const double *pb = b.data.data() + (shared ? 0 : bi * k * n);
      double *pc = out.data.data() + bi * m * n;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t l = 0; l < k; ++l) {
            double av = ta ? pa[l * m + i] : pa[i * k + l];
            double bv = tb ? pb[j * k + l] : pb[l * n + j];
            s += av * bv;
          }
          pc[i * n + j] = s;
        }
    }
    set(op, 0, std::move(out));
    return true;
  }

  bool run(Operation *op) {
    return llvm::TypeSwitch<Operation *, bool>(op)
        .Case([&](tsr::ConstantOp c) {
          auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
          if (!dense)
            return fail(op, "only dense constants are supported");
          RefTensor out(shapeOf(c.getType()));
          Type elem = dense.getElementType();
          int64_t i = 0;
          if (isa<FloatType>(elem)) {
            for (APFloat v : dense.getValues<APFloat>())
              out.data[i++] = v.convertToDouble();
          } else if (elem.isInteger(1)) {
            for (bool v : dense.getValues<bool>())
              out.data[i++] = v;
          } else {
            for (APInt v : dense.getValues<APInt>())
              out.data[i++] = (double)v.getSExtValue();
          }
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::AddOp) {
          return binary(op, [](double a, double b) { return a + b; });
        })
        .Case([&](tsr::SubOp) {
          return binary(op, [](double a, double b) { return a - b; });
        })
        .Case([&](tsr::MulOp) {
          return binary(op, [](double a, double b) { return a * b; });
        })
        .Case([&](tsr::DivOp d) {
          if (isIntType(d.getType()))
            return binary(op,
                          [](double a, double b) { return std::trunc(a / b); });
          return binary(op, [](double a, double b) { return a / b; });
        })
        .Case([&](tsr::PowOp) {
          return binary(op, [](double a, double b) { return std::pow(a, b); });
        })
        .Case([&](tsr::MaxOp) {
          return binary(op, [](double a, double b) { return std::max(a, b); });
        })
        .Case([&](tsr::EqualOp) {
          return binary(op, [](double a, double b) { return double(a == b); });
        })
        .Case([&](tsr::SelectOp) {
          const RefTensor &c = in(op, 0), &t = in(op, 1), &f = in(op, 2);
          RefTensor out(t.shape);
          for (int64_t i = 0; i < t.numel(); ++i)
            out.data[i] = c.data[i] != 0 ? t.data[i] : f.data[i];
          set(op, 0, std::move(out));
          return true;
        })
        .Case(
            [&](tsr::NegOp) { return unary(op, [](double x) { return -x; }); })
        .Case([&](tsr::ExpOp) {
          return unary(op, [](double x) { return std::exp(x); });
        })
        .Case([&](tsr::LogOp) {
          return unary(op, [](double x) { return std::log(x); });
        })
        .Case([&](tsr::SqrtOp) {
          return unary(op, [](double x) { return std::sqrt(x); });
        })
        .Case([&](tsr::RsqrtOp) {
          return unary(op, [](double x) { return 1.0 / std::sqrt(x); });
        })
        .Case([&](tsr::TanhOp) {
          return unary(op, [](double x) { return std::tanh(x); });
        })
        .Case([&](tsr::ErfOp) {
          return unary(op, [](double x) { return std::erf(x); });
        })
        .Case([&](tsr::ReluOp) {
          return unary(op, [](double x) { return x > 0 ? x : 0.0; });
        })
        .Case([&](tsr::GeluOp g) {
          bool t = g.getApproximate() == "tanh";
          return unary(op, [&](double x) { return gelu(x, t); });
        })
        .Case([&](tsr::SigmoidOp) {
          return unary(op, [](double x) { return sigmoid(x); });
        })
        .Case([&](tsr::SiluOp) {
          return unary(op, [](double x) { return x * sigmoid(x); });
        })
        .Case([&](tsr::ConvertOp c) {
          Type elem = c.getType().getElementType();
          if (elem.isInteger(1))
            return unary(op, [](double x) { return double(x != 0); });
          if (isa<IntegerType>(elem))
            return unary(op, [](double x) { return std::trunc(x); });
          return unary(op, [](double x) { return x; });
        })
        .Case([&](tsr::BroadcastOp b) {
          const RefTensor &x = in(op, 0);
          RefTensor out(shapeOf(b.getType()));
          int64_t offset = out.rank() - x.rank();
          std::vector<int64_t> xs = stridesOf(x.shape);
          for (int64_t i = 0; i < out.numel(); ++i) {
            std::vector<int64_t> idx = unflatten(i, out.shape);
            int64_t f = 0;
            for (int64_t d = 0; d < x.rank(); ++d)
              f += (x.shape[d] == 1 ? 0 : idx[d + offset]) * xs[d];
            out.data[i] = x.data[f];
          }
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::ReduceSumOp r) {
          return reduce(
              op, r.getAxes(), r.getKeepdim(), 0.0,
              [](double a, double b) { return a + b; }, false);
        })
        .Case([&](tsr::ReduceMeanOp r) {
          return reduce(
              op, r.getAxes(), r.getKeepdim(), 0.0,
              [](double a, double b) { return a + b; }, true);
        })
        .Case([&](tsr::ReduceMaxOp r) {
          return reduce(
              op, r.getAxes(), r.getKeepdim(), -INFINITY,
              [](double a, double b) { return std::max(a, b); }, false);
        })
        .Case([&](tsr::MatmulOp m) { return matmul(m); })
        .Case([&](tsr::ReshapeOp r) {
          RefTensor out = in(op, 0);
          out.shape = shapeOf(r.getType());
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::TransposeOp t) {
          const RefTensor &x = in(op, 0);
          RefTensor out(shapeOf(t.getType()));
          std::vector<int64_t> xs = stridesOf(x.shape);
          ArrayRef<int64_t> perm = t.getPermutation();
          for (int64_t i = 0; i < out.numel(); ++i) {
            std::vector<int64_t> idx = unflatten(i, out.shape);
            int64_t f = 0;
            for (int64_t d = 0; d < out.rank(); ++d)
              f += idx[d] * xs[perm[d]];
            out.data[i] = x.data[f];
          }
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::SliceOp s) {
          const RefTensor &x = in(op, 0);
          RefTensor out(shapeOf(s.getType()));
          std::vector<int64_t> xs = stridesOf(x.shape);
          for (int64_t i = 0; i < out.numel(); ++i) {
            std::vector<int64_t> idx = unflatten(i, out.shape);
            int64_t f = 0;
            for (int64_t d = 0; d < out.rank(); ++d)
              f +=
                  (s.getStartIndices()[d] + idx[d] * s.getStrides()[d]) * xs[d];
            out.data[i] = x.data[f];
          }
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::ConcatOp c) {
          RefTensor out(shapeOf(c.getType()));
          std::vector<int64_t> os = stridesOf(out.shape);
          int64_t axis = c.getAxis(), offset = 0;
          for (unsigned k = 0; k < op->getNumOperands(); ++k) {
            const RefTensor &x = in(op, k);
            for (int64_t i = 0; i < x.numel(); ++i) {
              std::vector<int64_t> idx = unflatten(i, x.shape);
              idx[axis] += offset;
              out.data[flatten(idx, os)] = x.data[i];
            }
            offset += x.shape[axis];
          }
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::GatherOp g) {
          const RefTensor &table = in(op, 0), &ids = in(op, 1);
          RefTensor out(shapeOf(g.getType()));
          int64_t row = table.numel() / table.shape[0];
          for (int64_t i = 0; i < ids.numel(); ++i) {
            int64_t id = (int64_t)ids.data[i];
            if (id < 0 || id >= table.shape[0])
              return fail(op, "id out of range");
            for (int64_t j = 0; j < row; ++j)
              out.data[i * row + j] = table.data[id * row + j];
          }
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::GatherGradOp g) {
          const RefTensor &ids = in(op, 0), &dy = in(op, 1);
          RefTensor out(shapeOf(g.getType()));
          int64_t row = out.numel() / out.shape[0];
          for (int64_t i = 0; i < ids.numel(); ++i) {
            int64_t id = (int64_t)ids.data[i];
            if (id < 0 || id >= out.shape[0])
              return fail(op, "id out of range");
            for (int64_t j = 0; j < row; ++j)
              out.data[id * row + j] += dy.data[i * row + j];
          }
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::LayerNormOp l) {
          const RefTensor &x = in(op, 0), &g = in(op, 1), &b = in(op, 2);
          double eps = l.getEpsilon().convertToDouble();
          int64_t inner = g.numel(), rows = x.numel() / inner;
          RefTensor out(x.shape);
          for (int64_t r = 0; r < rows; ++r) {
            const double *px = x.data.data() + r * inner;
            auto [mean, var] = test::rowMoments(px, inner);
            double rstd = 1.0 / std::sqrt(var + eps);
            for (int64_t j = 0; j < inner; ++j)
              out.data[r * inner + j] =
                  (px[j] - mean) * rstd * g.data[j] + b.data[j];
          }
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::LayerNormGradOp l) {
          const RefTensor &x = in(op, 0), &g = in(op, 1), &dy = in(op, 2);
          double eps = l.getEpsilon().convertToDouble();
          int64_t inner = g.numel(), rows = x.numel() / inner;
          RefTensor dx(x.shape), dg(g.shape), db(g.shape);
          std::vector<double> xhat(inner), dxhat(inner);
          for (int64_t r = 0; r < rows; ++r) {
            const double *px = x.data.data() + r * inner;
            const double *pdy = dy.data.data() + r * inner;
            auto [mean, var] = test::rowMoments(px, inner);
            double rstd = 1.0 / std::sqrt(var + eps);
            double m1 = 0, m2 = 0;
            for (int64_t j = 0; j < inner; ++j) {
              xhat[j] = (px[j] - mean) * rstd;
              dxhat[j] = pdy[j] * g.data[j];
              m1 += dxhat[j];
              m2 += dxhat[j] * xhat[j];
              dg.data[j] += pdy[j] * xhat[j];
              db.data[j] += pdy[j];
            }
            m1 /= inner;
            m2 /= inner;
            for (int64_t j = 0; j < inner; ++j)
              dx.data[r * inner + j] = rstd * (dxhat[j] - m1 - xhat[j] * m2);
          }
          set(op, 0, std::move(dx));
          set(op, 1, std::move(dg));
          set(op, 2, std::move(db));
          return true;
        })
        .Case([&](tsr::RmsNormOp l) {
          const RefTensor &x = in(op, 0), &g = in(op, 1);
          double eps = l.getEpsilon().convertToDouble();
          int64_t inner = g.numel(), rows = x.numel() / inner;
          RefTensor out(x.shape);
          for (int64_t r = 0; r < rows; ++r) {
            const double *px = x.data.data() + r * inner;
            double rstd = rmsRstd(px, inner, eps);
            for (int64_t j = 0; j < inner; ++j)
              out.data[r * inner + j] = px[j] * rstd * g.data[j];
          }
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::RmsNormGradOp l) {
          // y = x·r·g with r = (mean(x²) + ε)^-½, dr/dx_k = −r³·x_k / n:
          // dx_k = r·(dy_k·g_k − x̂_k·mean(dy·g·x̂)), dg = Σ_rows dy·x̂.
          const RefTensor &x = in(op, 0), &g = in(op, 1), &dy = in(op, 2);
          double eps = l.getEpsilon().convertToDouble();
          int64_t inner = g.numel(), rows = x.numel() / inner;
          RefTensor dx(x.shape), dg(g.shape);
          for (int64_t r = 0; r < rows; ++r) {
            const double *px = x.data.data() + r * inner;
            const double *pdy = dy.data.data() + r * inner;
            double rstd = rmsRstd(px, inner, eps);
            double m = 0;
            for (int64_t j = 0; j < inner; ++j) {
              m += pdy[j] * g.data[j] * px[j] * rstd;
              dg.data[j] += pdy[j] * px[j] * rstd;
            }
            m /= inner;
            for (int64_t j = 0; j < inner; ++j)
              dx.data[r * inner + j] =
                  rstd * (pdy[j] * g.data[j] - px[j] * rstd * m);
          }
          set(op, 0, std::move(dx));
          set(op, 1, std::move(dg));
          return true;
        })
        .Case([&](tsr::SoftmaxOp s) {
          const RefTensor &x = in(op, 0);
          RefTensor out(x.shape);
          int64_t outer, size, inner;
          splitAxis(x.shape, s.getAxis(), outer, size, inner);
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t j = 0; j < inner; ++j) {
              int64_t base = o * size * inner + j;
              double mx = -INFINITY, sum = 0;
              for (int64_t k = 0; k < size; ++k)
                mx = std::max(mx, x.data[base + k * inner]);
              for (int64_t k = 0; k < size; ++k)
                sum += std::exp(x.data[base + k * inner] - mx);
              for (int64_t k = 0; k < size; ++k)
                out.data[base + k * inner] =
                    std::exp(x.data[base + k * inner] - mx) / sum;
            }
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::SoftmaxGradOp s) {
          const RefTensor &y = in(op, 0), &dy = in(op, 1);
          RefTensor out(y.shape);
          int64_t outer, size, inner;
          splitAxis(y.shape, s.getAxis(), outer, size, inner);
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t j = 0; j < inner; ++j) {
              int64_t base = o * size * inner + j;
              double dot = 0;
              for (int64_t k = 0; k < size; ++k)
                dot += y.data[base + k * inner] * dy.data[base + k * inner];
              for (int64_t k = 0; k < size; ++k) {
                int64_t i = base + k * inner;
                out.data[i] = y.data[i] * (dy.data[i] - dot);
              }
            }
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::AttentionOp a) {
          const RefTensor &q = in(op, 0), &k = in(op, 1), &v = in(op, 2);
          const RefTensor *mask = a.getMask() ? &in(op, 3) : nullptr;
          AttentionRef ref(q, k, v, mask, a.getScale().convertToDouble(),
                           a.getCausal());
          RefTensor o(shapeOf(a.getOutput().getType())),
              lse(shapeOf(a.getLse().getType()));
          for (int64_t b = 0; b < ref.batch; ++b)
            for (int64_t i = 0; i < ref.sq; ++i) {
              std::vector<double> p;
              double l = ref.probs(b, i, p);
              lse.data[b * ref.sq + i] = l;
              for (int64_t j = 0; j < ref.sk; ++j)
                for (int64_t c = 0; c < ref.dv; ++c)
                  o.data[(b * ref.sq + i) * ref.dv + c] +=
                      p[j] * v.data[(ref.kv(b) * ref.sk + j) * ref.dv + c];
            }
          set(op, 0, std::move(o));
          set(op, 1, std::move(lse));
          return true;
        })
        .Case([&](tsr::AttentionGradOp a) {
          const RefTensor &q = in(op, 0), &k = in(op, 1), &v = in(op, 2);
          const RefTensor &o = in(op, 3), &dout = in(op, 5);
          const RefTensor *mask = a.getMask() ? &in(op, 6) : nullptr;
          double scale = a.getScale().convertToDouble();
          AttentionRef ref(q, k, v, mask, scale, a.getCausal());
          RefTensor dq(q.shape), dk(k.shape), dv(v.shape);
          for (int64_t b = 0; b < ref.batch; ++b)
            for (int64_t i = 0; i < ref.sq; ++i) {
              std::vector<double> p;
              ref.probs(b, i, p);
              const double *pdo = dout.data.data() + (b * ref.sq + i) * ref.dv;
              const double *po = o.data.data() + (b * ref.sq + i) * ref.dv;
              double delta = 0;
              for (int64_t c = 0; c < ref.dv; ++c)
                delta += pdo[c] * po[c];
              for (int64_t j = 0; j < ref.sk; ++j) {
                if (p[j] == 0)
                  continue;
                const int64_t kb = ref.kv(b); // GQA: the group's K/V row
                const double *pv = v.data.data() + (kb * ref.sk + j) * ref.dv;
                double dp = 0;
                for (int64_t c = 0; c < ref.dv; ++c) {
                  dp += pdo[c] * pv[c];
                  dv.data[(kb * ref.sk + j) * ref.dv + c] += p[j] * pdo[c];
                }
                double ds = p[j] * (dp - delta) * scale;
                for (int64_t c = 0; c < ref.dh; ++c) {
                  dq.data[(b * ref.sq + i) * ref.dh + c] +=
                      ds * k.data[(kb * ref.sk + j) * ref.dh + c];
                  dk.data[(kb * ref.sk + j) * ref.dh + c] +=
                      ds * q.data[(b * ref.sq + i) * ref.dh + c];
                }
              }
            }
          set(op, 0, std::move(dq));
          set(op, 1, std::move(dk));
          set(op, 2, std::move(dv));
          return true;
        })
        .Case([&](tsr::ReluGradOp) {
          return binary(op,
                        [](double x, double dy) { return x > 0 ? dy : 0.0; });
        })
        .Case([&](tsr::GeluGradOp g) {
          bool t = g.getApproximate() == "tanh";
          return binary(op, [&](double x, double dy) {
            return dy * geluDerivative(x, t);
          });
        })
        .Case([&](tsr::SiluGradOp) {
          return binary(
              op, [](double x, double dy) { return dy * siluDerivative(x); });
        })
        .Case([&](tsr::CrossEntropyOp) {
          const RefTensor &x = in(op, 0), &lab = in(op, 1);
          int64_t n = x.shape[0], v = x.shape[1];
          double total = 0;
          for (int64_t r = 0; r < n; ++r) {
            int64_t l = (int64_t)lab.data[r];
            if (l < 0 || l >= v)
              return fail(op, "label out of range");
            double mx = -INFINITY, s = 0;
            for (int64_t j = 0; j < v; ++j)
              mx = std::max(mx, x.data[r * v + j]);
            for (int64_t j = 0; j < v; ++j)
              s += std::exp(x.data[r * v + j] - mx);
            total += std::log(s) + mx - x.data[r * v + l];
          }
          set(op, 0, RefTensor({}, total));
          return true;
        })
        .Case([&](tsr::CrossEntropyGradOp) {
          const RefTensor &x = in(op, 0), &lab = in(op, 1), &g = in(op, 2);
          int64_t n = x.shape[0], v = x.shape[1];
          RefTensor out(x.shape);
          for (int64_t r = 0; r < n; ++r) {
            int64_t l = (int64_t)lab.data[r];
            if (l < 0 || l >= v)
              return fail(op, "label out of range");
            double mx = -INFINITY, s = 0;
            for (int64_t j = 0; j < v; ++j)
              mx = std::max(mx, x.data[r * v + j]);
            for (int64_t j = 0; j < v; ++j)
              s += std::exp(x.data[r * v + j] - mx);
            for (int64_t j = 0; j < v; ++j)
              out.data[r * v + j] =
                  (std::exp(x.data[r * v + j] - mx) / s - (j == l ? 1 : 0)) *
                  g.data[0];
          }
          set(op, 0, std::move(out));
          return true;
        })
        .Case([&](tsr::SgdUpdateOp u) {
          double lr = in(op, 2).data[0];
          double wd = u.getWeightDecay().convertToDouble();
          return binary(
              op, [&](double p, double g) { return p - lr * (g + wd * p); });
        })
        .Case([&](tsr::AdamwUpdateOp u) {
          const RefTensor &p = in(op, 0), &g = in(op, 1), &m = in(op, 2),
                          &v = in(op, 3), &t = in(op, 4);
          double lr = in(op, 5).data[0];
          double b1 = u.getBeta1().convertToDouble();
          double b2 = u.getBeta2().convertToDouble();
          double eps = u.getEps().convertToDouble();
          double wd = u.getWeightDecay().convertToDouble();
          double step = t.data[0];
          RefTensor np(p.shape), nm(p.shape), nv(p.shape);
          double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
          for (int64_t i = 0; i < p.numel(); ++i) {
            double pi = p.data[i] * (1 - lr * wd);
            nm.data[i] = b1 * m.data[i] + (1 - b1) * g.data[i];
            nv.data[i] = b2 * v.data[i] + (1 - b2) * g.data[i] * g.data[i];
            np.data[i] =
                pi - lr / bc1 * nm.data[i] /
                         (std::sqrt(nv.data[i]) / std::sqrt(bc2) + eps);
          }
          set(op, 0, std::move(np));
          set(op, 1, std::move(nm));
          set(op, 2, std::move(nv));
          return true;
        })
        .Default([&](Operation *) { return fail(op, "unsupported op"); });
  }
};

} // namespace

bool tessera::test::evaluate(func::FuncOp func,
                             const std::vector<RefTensor> &args,
                             std::vector<RefTensor> &results,
                             std::string &error) {
  if (args.size() != func.getNumArguments()) {
    error = "wrong number of arguments";
    return false;
  }
  Interpreter interp(error);
  for (auto [i, arg] : llvm::enumerate(func.getArguments())) {
    if (shapeOf(arg.getType()) != args[i].shape) {
      error = "argument " + std::to_string(i) + " has the wrong shape";
      return false;
    }
    interp.env[arg] = args[i];
  }
  for (Operation &op : func.front()) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      results.clear();
      for (Value v : ret.getOperands())
        results.push_back(interp.env.find(v)->second);
      return true;
    }
    if (!interp.run(&op))
      return false;
  }
  error = "no func.return";
  return false;
}
