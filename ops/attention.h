// Fused multi-head attention (FlashAttention-style), ported line for line from the Pallas seed
// (jax/experimental/pallas/ops/gpu/attention.py): the forward kernel with causal and segment-id
// masks and the log-sum-exp residual, the backward preprocess kernel and the dq/dk/dv kernel, and
// their wiring as a custom VJP. Layout: q, k, v, out are (batch, seq_len, num_heads, head_dim);
// segment_ids is (batch, seq_len) int32 or a none Array; lse and delta are (batch, num_heads, seq_len).
#pragma once
#include <functional>
#include <string>
#include <tuple>

#include "palladium/array.h"

namespace palladium::ops {

enum class MhaBackwardDq { SeparateLoop, Atomic };

struct MhaOptions {
  float sm_scale = 1.0f;
  bool causal = false;
  int64_t block_q = 128;
  int64_t block_k = 128;
  std::string backend;   // "" = the default backend
  bool debug = false;
  // CUDA: exp and log on the special-function unit, as the seed's Triton lowering does (a few
  // float32 ulps; see CompilerParams::fast_math). The interpreter and cpu are exact either way.
  bool fast_math = true;
  // The seed's num_warps and num_stages, passed to the compiled backends as CompilerParams; 0 lets
  // the backend choose (the seed's None picks Triton's 4 or 8 warps by head_dim, while the cuda
  // backend sizes warps to the dot tiles: 16 rows per warp on wgmma). num_stages is the forward's.
  int num_warps = 0;
  int num_stages = 0;
  // The backward kernels' stages: the seed's 2 (its four warps then share an SM with a second
  // program instead of a third prefetch stage: H100 fwd+bwd +33..43% at head_dim 64).
  int backward_num_stages = 2;
  // The backward's block_q = block_k; 0 takes the forward's, as the seed does (which needs
  // block_q == block_k). At 128 the backward's tiles overflow the registers (H100, head_dim 64:
  // 25 TF/s against 161 at 64), so 64 is the default.
  int64_t backward_block = 64;
  // With backward_dq = Atomic, the backward's query block where it differs from its key block
  // (backward_block): the dk/dv scan's accumulators grow with the key block and its dots' rows
  // with the query block, so FlashAttention-3's shape, 64 queries by 128 keys, can be tried.
  // 0: backward_block. The seed's separate dq scan needs the two equal. On an H200 (stop 43,
  // job 2) 64 x 128 ran slower than the default everywhere: fwd+bwd d64 s2048 4.66 against 2.49 ms,
  // d128 s8192 14.3 against 8.5 (two warpgroups, no producer, 224-255 registers).
  int64_t backward_block_q = 0;
  // How the backward computes dq. SeparateLoop is the seed's: a second scan over key blocks in
  // each program, which recomputes q k^T and dout v^T (seven dots per pair of blocks). Atomic adds
  // each block pair's ds @ k into a float32 dq during the first scan (five dots, FlashAttention-2's
  // way); the order of those adds varies from run to run, so dq's last float32 bits do too. On an
  // H100 Atomic ran 0.74-0.87x SeparateLoop's speed (stop 30, job 2): its adds move seq/block
  // times dq's bytes through L2 (4.3 GB at d128, s2048, block 64), more than two dots cost.
  MhaBackwardDq backward_dq = MhaBackwardDq::SeparateLoop;
  // The forward's block_q and block_k chosen by timing the shapes among 128 and 64 that divide the
  // sequence, at the first call of each input signature on each device (pl::autotune; remembered in
  // the disk cache). block_q and block_k are then ignored by the forward.
  bool autotune = false;
};

// mha(q, k, v, segment_ids): the attention output.
Array mha(const Array& q, const Array& k, const Array& v, const Array& segment_ids, const MhaOptions& options = {});

// The forward pass that also returns the residual lse = m + log(l) (the seed's _mha_forward).
std::tuple<Array, Array> mha_forward(const Array& q, const Array& k, const Array& v, const Array& segment_ids,
                                     const MhaOptions& options = {});

// delta = sum(out * dout, axis=-1), per (batch, head, position).
Array mha_preprocess_backward(const Array& out, const Array& dout, const MhaOptions& options = {});

// dq, dk, dv from the forward residuals and the output cotangent, in blocks of backward_block (or,
// with backward_block = 0, the forward's blocks: as in the seed, dq is computed in blocks of
// block_q over a grid of key blocks, so block_q must then equal block_k).
std::tuple<Array, Array, Array> mha_backward(const Array& q, const Array& k, const Array& v, const Array& segment_ids,
                                             const Array& out, const Array& lse, const Array& dout,
                                             const MhaOptions& options = {});

// The custom VJP: the output, and a function from its cotangent to (dq, dk, dv).
struct MhaVjp {
  Array out;
  std::function<std::tuple<Array, Array, Array>(const Array& dout)> backward;
};
MhaVjp mha_vjp(const Array& q, const Array& k, const Array& v, const Array& segment_ids, const MhaOptions& options = {});

// Plain C++ float64 references (the seed's mha_reference and its gradients): softmax attention
// with masked logits at -inf; results are returned as float64 Arrays.
struct AttentionReference {
  Array out, lse;
};
AttentionReference mha_reference(const Array& q, const Array& k, const Array& v, const Array& segment_ids,
                                 double sm_scale, bool causal);
std::tuple<Array, Array, Array> mha_reference_backward(const Array& q, const Array& k, const Array& v,
                                                       const Array& segment_ids, const Array& dout, double sm_scale,
                                                       bool causal);

}  // namespace palladium::ops
