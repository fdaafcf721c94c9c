// See Backward.h. Every function walks the forward op's loops and sends each result
// element's gradient back along the reads that produced it (the adjoint of the forward
// loop nest in ir/interp/RefOps.cpp), so stride, padding, dilation and groups need no
// separate derivation.
#include "base/Backward.h"

#include "base/Error.h"

#include <fmt/format.h>

#include <cmath>

namespace dnnc::rt {
namespace {

using Shape = std::vector<int64_t>;

// The double accumulator rounded into a tensor of `like`'s dtype and shape.
Tensor rounded(const Tensor &like, const std::vector<double> &acc) {
  Tensor r = Tensor::zeros(like.dtype, like.shape);
  for (size_t k = 0; k < acc.size(); ++k)
    r.set(k, acc[k]);
  return r;
}

// The output extent of a window of `span` elements at `stride` over `n + 2·pad`.
int64_t windows(int64_t n, int64_t pad, int64_t span, int64_t stride) {
  int64_t out = (n + 2 * pad - span) / stride + 1;
  return n + 2 * pad < span ? 0 : out;
}

// Calls f(g flat, x flat, w flat) for every multiply of conv2d(x, w) whose input element is
// inside x (the padding reads zeros and passes nothing).
template <class F> void convReads(const Shape &xs, const Shape &ws, const Conv2dParams &p, F f) {
  int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  int64_t O = ws[0], CG = ws[1], KH = ws[2], KW = ws[3];
  int64_t OH = windows(H, p.padding, p.dilation * (KH - 1) + 1, p.stride);
  int64_t OW = windows(W, p.padding, p.dilation * (KW - 1) + 1, p.stride);
  int64_t perGroup = O / p.groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          size_t gk = static_cast<size_t>(((n * O + o) * OH + oh) * OW + ow);
          int64_t grp = o / perGroup;
          for (int64_t ci = 0; ci < CG; ++ci)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t ih = oh * p.stride - p.padding + kh * p.dilation, iw = ow * p.stride - p.padding + kw * p.dilation;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                  continue;
                f(gk, static_cast<size_t>(((n * C + grp * CG + ci) * H + ih) * W + iw),
                  static_cast<size_t>(((o * CG + ci) * KH + kh) * KW + kw));
              }
        }
}

// Calls f(g flat, window) for every pooling window, `window` listing the flat positions
// of its elements inside x in row-major order.
template <class F> void poolWindows(const Shape &xs, int64_t k, int64_t stride, int64_t pad, F f) {
  if (stride == 0)
    stride = k;
  int64_t NC = xs[0] * xs[1], H = xs[2], W = xs[3];
  int64_t OH = windows(H, pad, k, stride), OW = windows(W, pad, k, stride);
  std::vector<size_t> window;
  for (int64_t nc = 0; nc < NC; ++nc)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        window.clear();
        for (int64_t kh = 0; kh < k; ++kh)
          for (int64_t kw = 0; kw < k; ++kw) {
            int64_t ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
            if (ih >= 0 && ih < H && iw >= 0 && iw < W)
              window.push_back(static_cast<size_t>((nc * H + ih) * W + iw));
          }
        f(static_cast<size_t>((nc * OH + oh) * OW + ow), window);
      }
}

} // namespace

Tensor conv2dGradInput(const Tensor &like, const Tensor &g, const Tensor &w, const Conv2dParams &p) {
  std::vector<double> acc(like.numel(), 0.0);
  convReads(like.shape, w.shape, p, [&](size_t gk, size_t xk, size_t wk) { acc[xk] += g.get(gk) * w.get(wk); });
  return rounded(like, acc);
}

Tensor conv2dGradWeight(const Tensor &like, const Tensor &x, const Tensor &g, const Conv2dParams &p) {
  std::vector<double> acc(like.numel(), 0.0);
  convReads(x.shape, like.shape, p, [&](size_t gk, size_t xk, size_t wk) { acc[wk] += g.get(gk) * x.get(xk); });
  return rounded(like, acc);
}

Tensor maxPool2dGrad(const Tensor &x, const Tensor &g, int64_t kernel, int64_t stride, int64_t padding) {
  std::vector<double> acc(x.numel(), 0.0);
  poolWindows(x.shape, kernel, stride, padding, [&](size_t gk, const std::vector<size_t> &window) {
    if (window.empty())
      return;
    size_t best = window[0];
    for (size_t k : window) {
      double v = x.get(k), b = x.get(best);
      if (v > b || (std::isnan(v) && !std::isnan(b)))
        best = k;
    }
    acc[best] += g.get(gk);
  });
  return rounded(x, acc);
}

Tensor avgPool2dGrad(const Tensor &like, const Tensor &g, int64_t kernel, int64_t stride, int64_t padding) {
  std::vector<double> acc(like.numel(), 0.0);
  double share = 1.0 / static_cast<double>(kernel * kernel);
  poolWindows(like.shape, kernel, stride, padding, [&](size_t gk, const std::vector<size_t> &window) {
    for (size_t k : window)
      acc[k] += g.get(gk) * share;
  });
  return rounded(like, acc);
}

Tensor scatterAdd(const Tensor &x, const Tensor &idx, const Tensor &src, size_t axis) {
  std::vector<double> acc(x.numel());
  for (size_t k = 0; k < acc.size(); ++k)
    acc[k] = x.get(k);
  Shape st = stridesOf(x.shape);
  int64_t d = x.shape[axis];
  forEachIndex(src.shape, [&](const Shape &s, size_t flat) {
    int64_t j = idx.getInt(flat);
    if (j < -d || j >= d)
      throw DataError(fmt::format("index {} is out of range for dim {} of {} (size {})", j, axis, x.typeText(), d));
    size_t dst = 0;
    for (size_t a = 0; a < s.size(); ++a)
      dst += static_cast<size_t>((a == axis ? (j < 0 ? j + d : j) : s[a]) * st[a]);
    acc[dst] += src.get(flat);
  });
  return rounded(x, acc);
}

Tensor maskedScatter(const Tensor &like, const Tensor &mask, const Tensor &g) {
  Shape shape = broadcastShape(like.shape, mask.shape);
  std::vector<double> acc(like.numel(), 0.0);
  size_t next = 0;
  forEachIndex(shape, [&](const Shape &idx, size_t) {
    if (mask.get(broadcastAt(mask, idx)) != 0) {
      if (next >= g.numel())
        throw DataError(fmt::format("masked_select's gradient {} has fewer elements than the mask selects", g.typeText()));
      acc[broadcastAt(like, idx)] += g.get(next++);
    }
  });
  return rounded(like, acc);
}

Tensor resizeGrad(const Tensor &like, const Tensor &g) {
  std::vector<double> acc(like.numel(), 0.0);
  Shape st = stridesOf(like.shape);
  forEachIndex(g.shape, [&](const Shape &idx, size_t flat) {
    size_t dst = 0;
    for (size_t k = 0; k < idx.size(); ++k)
      dst += static_cast<size_t>(idx[k] * like.shape[k] / g.shape[k] * st[k]);
    acc[dst] += g.get(flat);
  });
  return rounded(like, acc);
}

Tensor indexScatter(const Tensor &like, const Tensor &g, const std::vector<int64_t> &first,
                    const std::vector<int64_t> &count, const std::vector<int64_t> &step) {
  std::vector<double> acc(like.numel(), 0.0);
  Shape st = stridesOf(like.shape);
  forEachIndex(count, [&](const Shape &idx, size_t flat) {
    size_t dst = 0;
    for (size_t a = 0; a < idx.size(); ++a)
      dst += static_cast<size_t>((first[a] + idx[a] * step[a]) * st[a]);
    acc[dst] += g.get(flat);
  });
  return rounded(like, acc);
}

} // namespace dnnc::rt
