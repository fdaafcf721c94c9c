// Fusion: groups of ops that become one kernel, made into `fused` ops whose region holds
// the group (the reference interpreter runs the region op by op; the back ends compile it
// as one loop nest). Three kinds, each enabled on its own:
//   elementwise  chains of elementwise and broadcast ops (and constant fills, arange);
//   injective    transpose, reshape, squeeze/unsqueeze/flatten, broadcast_to and
//                static slices folded into their consumer's index map;
//   reduction    elementwise prologues folded into a reduction or softmax; and row
//                groups: an elementwise root with the f32 sums and means over its last
//                axis (keepdims) among its producers, each with its own prologue, which
//                its kernel computes row by row before the row's elements (layer norm,
//                RMS norm: one kernel).
//
// Contract: a producer joins its consumer's group only when its one result has exactly
// one use (in a row group: any number) and its uses are in the group (nothing outside
// needs it materialized; a value read twice is computed where each reads it), both are
// in the same region, and the shapes agree as the analyzer typed them (consumers read
// producers through the same broadcasting and index maps the unfused ops use). Results are
// unchanged up to float reassociation (none is introduced: each element is computed by the
// same scalar ops in the same order). Control flow, host ops, matmul and convolution are
// never fused, except a matmul (or, with ConvEpilogue, a conv2d) as the GEMM of an
// elementwise root's epilogue; not into a
// root whose result is an in-place update (Graph::updates): the GEMM's sums would land in
// the updated param before the epilogue reads its old value.
#pragma once

#include "ir/graph/Graph.h"

#include <set>

namespace dnnc::ir {

struct FusionStats {
  int groups = 0;    // fused ops made
  int opsFused = 0;  // ops moved into them
};

// ConvEpilogue: an f32 conv2d with at least kConvGemmMinChannels output channels per group
// joins an elementwise root as its implicit GEMM's epilogue, as a matmul does; only for
// targets that run such convolutions as GEMMs (PassOptions::convEpilogues).
enum class FusionKind { Elementwise, Injective, Reduction, ConvEpilogue };

// Fuses with the given kinds over every region of `g` (one walk: a group may mix them).
FusionStats fuse(Graph &g, const std::set<FusionKind> &kinds);
// Elementwise, injective and reduction fusion, and with `convEpilogues` ConvEpilogue.
FusionStats fuseAll(Graph &g, bool convEpilogues = false);

} // namespace dnnc::ir
