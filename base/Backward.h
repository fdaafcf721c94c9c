// The arithmetic of the backward ops the differentiate pass builds (conv2d_grad_input,
// conv2d_grad_weight, max_pool2d_grad, avg_pool2d_grad, scatter_add, masked_scatter,
// resize_grad, index_grad; see ir/graph/Ops.def). The reference interpreter and the runtime's host ops
// both call these, so the two agree by construction; what checks them is the finite
// differences of tests/numerics/test_grad.py, not each other.
//
// Each function returns a tensor of `like`'s dtype and shape (the forward operand the
// gradient flows to), accumulating in double and rounding once per element. Attributes are
// the forward op's, already checked by its shape rule.
#pragma once

#include "base/Tensor.h"

#include <cstdint>
#include <vector>

namespace dnnc::rt {

struct Conv2dParams {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
};

// d conv2d(x, w) / dx given the result's gradient g: every g element times the weights it
// was computed with, added back to the input element each weight read.
Tensor conv2dGradInput(const Tensor &like, const Tensor &g, const Tensor &w, const Conv2dParams &p);
// d conv2d(x, w) / dw: every g element times the input element each weight read.
Tensor conv2dGradWeight(const Tensor &like, const Tensor &x, const Tensor &g, const Conv2dParams &p);
// max_pool2d's gradient: each window's g to the window's maximum, the first one on ties
// and a NaN over any number (PyTorch's CPU kernel); padding never wins.
Tensor maxPool2dGrad(const Tensor &x, const Tensor &g, int64_t kernel, int64_t stride, int64_t padding);
// avg_pool2d's gradient: g / kernel² to every element of the window (the padding counts
// in the divisor, as in the forward op).
Tensor avgPool2dGrad(const Tensor &like, const Tensor &g, int64_t kernel, int64_t stride, int64_t padding);
// x with src[i] added at i's position with its `axis` coordinate replaced by idx[i] (idx
// and src have one shape, x may be longer along axis; torch.scatter_add). Negative
// indices count from the end; one out of range is a DataError.
Tensor scatterAdd(const Tensor &x, const Tensor &idx, const Tensor &src, size_t axis);
// The gradient of masked_select(x, mask): g's k-th element added at the position of the
// k-th true element of mask (x and mask broadcast together; x's broadcast axes summed).
Tensor maskedScatter(const Tensor &like, const Tensor &mask, const Tensor &g);
// The gradient of resize(x, size) (nearest neighbour: output index i reads i·n/m of an
// axis resized from n to m): each g element added back to the element it copied.
Tensor resizeGrad(const Tensor &like, const Tensor &g);
// The gradient of a slice: zeros of like's shape with g at the positions the slice read,
// `first + i·step` per axis for i < count (a point axis has count 1 and is absent from g).
Tensor indexScatter(const Tensor &like, const Tensor &g, const std::vector<int64_t> &first,
                    const std::vector<int64_t> &count, const std::vector<int64_t> &step);

} // namespace dnnc::rt
