// Prepacking constant weights: a matmul whose B is a param (or a param's transpose, or a
// slice w[l] of a param) reads it from a `prepack` op, which the CPU lowers to its GEMM's
// panel layout (a narrow B's: transposed). Params are constants once the model loads, so
// the runtime runs each prepack kernel once for the params it is given and keeps its
// result between calls (planned memory: see MemoryPlan.h), and the GEMM reads the panels
// without packing B again on every call.
//
// Contract: changes no value (prepack(w, perm) is transpose(w, perm); only the layout a
// target stores differs). Applies to f32 matmuls whose B is a rank-2 param, transpose(w)
// of a rank-2 param w, or a slice of a param of higher rank at leading points (`w[l]`,
// its last two axes whole: the transformer's per-layer weights in its `for` loop), with
// constant dims and at least kPrepackPanel columns (panels of kPrepackPanel columns, the
// last one of N % kPrepackPanel where that is not 0: no padding, so every slice of a
// packed w is packed in place, w[l]'s panels at w[l]'s offset) or at most kNarrowColumns
// (stored transposed, for the CPU's dot products; a B between the two gains nothing from
// a copy). One prepack per (param, perm), placed right after the param; a slice is
// taken of the packed copy instead, where the slice of the param was; a transpose or slice
// left unused is removed. Returns how many matmuls now read a prepacked B.
#pragma once

#include "ir/graph/Graph.h"

namespace dnnc::ir {

int prepackWeights(Graph &g);

} // namespace dnnc::ir
