// Fused attention: the ops of scaled dot-product attention, as nn.causal_attention and
// hand-written models spell it,
//   p = softmax(where(causal, matmul(q, transpose(k)) * scale + mask, fill), axis = -1)
//   o = matmul(p, v)
// (the scale, the mask and the causal where each optional), become one `attention` op,
// which a target computes without storing the Tq x Tk scores (the CPU: tiled over query
// rows with an online softmax, backend/llvm/CpuKernelEmitter.cpp).
//
// Contract: changes no value: attention's semantics are the replaced ops' (the oracle
// rounds each intermediate to f32 where they stored it). Matches only where
// - every op of the chain is f32, q, k and v have one rank and the same batch dims, the
//   softmax runs over the last axis, and transpose(k) swaps k's last two axes;
// - the scale is a multiplication by a rank-0 f32 constant, the mask an f32 operand of
//   an add (either side) that broadcasts to the scores;
// - the causal predicate is le(unsqueeze(arange(T), 0), unsqueeze(arange(T), 1)) or its
//   mirror ge(unsqueeze(arange(T), 1), unsqueeze(arange(T), 0)) with Tq = Tk = T, start 0,
//   step 1, i.e. key j visible from query i iff j <= i, and the fill a rank-0 f32 constant;
// - each intermediate (the scores at every step, the probabilities) is read once, by the
//   next op of the chain: a backward graph that reads the probabilities keeps the unfused
//   ops, so differentiation (which runs first) sees only ops with gradient rules.
// The replaced ops and whatever only they read (transpose(k), the predicate, constants)
// are removed. Returns how many attention ops it made.
#pragma once

#include "ir/graph/Graph.h"

namespace dnnc::ir {

int fuseAttention(Graph &g);

} // namespace dnnc::ir
