// This CPU's peaks, measured where they are used: `dnnc run --profile` reports kernels as
// a share of them, and bench/gemm_bench.cpp its GEMM.
#pragma once

namespace dnnc::rt {

// fp32 FLOP/s of `threads` threads at once, each running 16 independent chains of FMAs
// on the widest vectors this CPU has (AVX-512, else AVX2 with FMA, else SSE's separate
// multiply and add, counted as two FLOPs too). `iterations` per chain sets the time
// taken (2e7: about 0.1 s at 3 GHz with AVX-512).
double measureFmaPeak(unsigned threads, long iterations = 20'000'000);

// Bytes per second read plus written by `threads` threads copying 256 MiB into another
// 256 MiB (more than the caches hold), the best of 3 copies: memory bandwidth as a
// STREAM-like copy sees it.
double measureCopyBandwidth(unsigned threads);

} // namespace dnnc::rt
