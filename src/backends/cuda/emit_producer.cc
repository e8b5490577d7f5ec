// Warp specialisation (sm_90a). In a software-pipelined K loop whose tiles all come through the
// TMA, the consumers used to meet at a block-wide barrier every iteration so that thread 0 could
// refill the buffer the previous dot had read, and the refill ran only stages - 2 iterations ahead.
// Here one extra warp, after the consumer warps, does nothing but issue the copies: its lane 0
// recomputes the loop's bounds and the loads' indices (top-level scalars only: program ids,
// constants and arithmetic on them), and walks each served loop's iterations in order, filling
// slot (i - lo) % stages once the consumers have given it back. The consumers wait on the slot's
// full barrier as before; at the end of iteration i, where the dot of iteration i - 1 has been
// retired (pl_wgmma_wait<1>), each consumer warp arrives on that slot's empty barrier. Their other
// barriers become a named barrier among the consumer threads. PALLADIUM_CUDA_WARP_SPECIALIZE=0
// keeps the single-role kernel.
//
// An unpipelined loop with two or more wgmma dots (the attention forward's q k^T and p v) is served
// the same way where two consumer warpgroups run it, and they then take turns at the tensor cores
// (ping-pong), so that one warpgroup's softmax overlaps the other's dots instead of both meeting
// at a block-wide barrier each iteration. A turn runs from the body's last dot of iteration i to
// its first dot of iteration i + 1 (p v, then the next q k^T; the first iteration's first dot is a
// turn of its own): a warpgroup waits for its turn (pl_turn_wait) before the last dot and passes
// it on (pl_turn_pass) after the next first one, so the other's softmax has two dots' time. A
// slot goes back at the end of the iteration reading it (its dots are retired there).
// Opt-in (PALLADIUM_CUDA_PINGPONG=1): on an H100 (stop 31, jobs 1-3) it moved the head_dim 128
// forward by -3% (causal) to +2%, and cost head_dim 64, whose two programs per SM already overlap
// each other, 12-18%; a turn per dot was no better and the producer without turns worse (job 2;
// both variants since removed). Stop 35 job 2, with the turns' barrier ids in registers, still
// slower: d64 blocks 128 x 64 s2048 0.827/0.826 -> 0.979 ms, causal d128 128 x 128 s8192
// 1.254/1.260 -> 1.404.
//
// By default the software-pipelined loop (dot_pipeline.cc) takes turns where two consumer
// warpgroups run it, as FlashAttention-3 does: a turn is the issue of the next iteration's first
// dot and this iteration's last (the prologue's first dot a turn of its own), so each warpgroup's
// softmax runs while the other's two dots hold the tensor cores. H100, stop 35 job 2, same
// binary, two rounds each, ms: d128 blocks 128 x 128 s8192 2.017/2.021 -> 2.003/1.985, s2048
// within noise; d64 128 x 128 s2048 0.872 -> 0.857, s8192 3.26 -> 3.19, causal 1.98 -> 1.93; no
// row slower. (Job 1, with the turn's barrier chosen by a branch on the warpgroup, ptxas
// serialised every wgmma, C7520, and the causal d128 128 x 64 ran 0.45 -> 0.60 ms.)
//
// With two or more consumer warpgroups the producer is a whole warpgroup (only its first lane
// works) and the registers move (setmaxnreg): the block is launched at 168 registers a thread
// (384 threads, one block per SM), the producer drops to 24 and the consumers rise to 240. The
// warpgroup-wide instruction also tells ptxas the consumers run converged: behind a single producer
// warp it serialised the wgmma of the attention forward's pipelined loop (C7520), which is why
// that loop (a first dot issued a round ahead, dot_pipeline.cc) gets a producer only this way.
// Same binary, one job (H100, stop 32 job 1, bench/results/h100_stop32_job1_*), ms: bf16 matmul
// 128 x 256 tiles 8192^3, 4 stages 1.593 -> 1.499, 3 stages 1.760 -> 1.468 (cuBLASLt 1.384-1.392);
// 4096^3 0.218 -> 0.201; attention forward d128 s8192, blocks 128 x 64, 2.518 -> 2.420.
// PALLADIUM_CUDA_REG_SHARE=0 keeps the single producer warp.
//
// A served attention loop's ring is split (split_served_rings): K's tiles and V's complete and go
// back on barrier sets of their own, K's slot a round before V's, and the producer sends K's tiles
// a round ahead of V's. So that loop runs pipelined on two stages where a third does not fit
// (head_dim 128, blocks 128 x 128: 0.622 -> 0.599 ms at s2048, 2.160 -> 2.046 at s8192; H100, stop
// 33 job 1).
#include <algorithm>
#include <cstdlib>

#include "backends/cuda/emitter.h"

namespace palladium::cuda {
namespace {

bool producer_computable(ir::Op op) {
  return (ir::op_family(op) == ir::Family::Leaf && op != ir::Op::Iota) || is_index_arith(op);
}

// PALLADIUM_CUDA_PINGPONG: by default the software-pipelined loops take turns, and so do the
// two-stage loops left unpipelined because their bounds differ between programs; "1" takes turns
// in every loop unpipelined instead (and drops the two-stage pipelining), "0" in none.
std::string pingpong_mode() {
  const char* env = std::getenv("PALLADIUM_CUDA_PINGPONG");
  return env ? env : "";
}
bool pingpong_enabled() { return pingpong_mode() == "1"; }
bool pipelined_pingpong_enabled() { return pingpong_mode() != "0" && pingpong_mode() != "1"; }

// A two-stage attention loop whose bounds differ between programs (the causal forward) stays
// software-pipelined, served by the producer; PALLADIUM_CUDA_PIPELINE_VARYING=0 has it take turns
// unpipelined instead (the form before stop 48).
bool pipeline_varying_enabled() {
  const char* env = std::getenv("PALLADIUM_CUDA_PIPELINE_VARYING");
  return !(env && std::string(env) == "0");
}

bool register_rebalancing_enabled() {
  const char* env = std::getenv("PALLADIUM_CUDA_REG_SHARE");
  return !(env && std::string(env) == "0");
}

}  // namespace

void Emitter::choose_producer() {
  if (pingpong_enabled()) drop_short_pipelines();  // the opt-in ping-pong takes turns in the unpipelined loop
  assign_producer();
  drop_short_pipelines();
  split_served_rings();
}

void Emitter::assign_producer() {
  const char* env = std::getenv("PALLADIUM_CUDA_WARP_SPECIALIZE");
  if ((env && std::string(env) == "0") || tma_rings_.empty() || k_.any_sequential() || !reuse_barriers_.empty() ||
      threads_ % 128 != 0 || threads_ + 32 > 1024)
    return;
  // The top-level scalars computable from program ids and constants alone.
  std::set<ir::ValueId> known;
  std::vector<const ir::Inst*> scalars;
  for (const ir::Inst& in : k_.body.body) {
    bool ok = in.regions.empty() && producer_computable(in.op) && !in.results.empty();
    for (ir::ValueId r : in.results) ok = ok && type(r).shape.empty();
    for (ir::ValueId o : in.operands) ok = ok && known.count(o);
    if (!ok) continue;
    scalars.push_back(&in);
    known.insert(in.results.begin(), in.results.end());
  }
  const std::vector<ir::Inst>& top = k_.body.body;
  // Two or more consumer warpgroups: the producer is a warpgroup that hands its registers over.
  const bool rebalance = register_rebalancing_enabled() && threads_ >= 256 && threads_ % 128 == 0;
  for (const auto& [loop, ring] : tma_rings_) {
    const PipelinedLoop* pipe = pipelined_loop(*loop);
    // The attention shape (a first dot) only with the producer warpgroup: after one producer warp
    // the consumers' code is a divergent path to ptxas, which then serialises every wgmma (C7520;
    // the forward d128 s8192, blocks 128 x 64, ran 2.50 -> 3.44 ms on an H100, stop 31 job 3). The
    // warpgroup-wide setmaxnreg at the top of the consumers' branch keeps them converged.
    if (ring.cp_async || (pipe && pipe->first_dot && !rebalance) || loop < &top.front() || loop > &top.back())
      continue;
    // On two stages only a ring that splits (K's tiles from the rest) keeps the loop from waiting
    // for the slot that it is about to give back. A loop whose bounds depend on the program (the
    // causal forward's triangle) stays pipelined too: on an H200 the causal d128 forward at
    // 128 x 128 ran 4-8% faster so than unpipelined with turns (stop 47 job 43, stop 48 job 44:
    // s2048 0.297 -> 0.274 ms, s8192 0.981 -> 0.940), though on an H100 before the producer
    // warpgroup and the split barriers it had run 3-6% slower (stop 33 jobs 1-2).
    // PALLADIUM_CUDA_PIPELINE_VARYING=0 serves such a loop unpipelined, its warpgroups taking turns
    // at the dots: against no producer at all the causal forward d128 blocks 128 x 128 ran s2048
    // 0.365/0.368 -> 0.344/0.346 ms and s8192 1.145/1.150 -> 1.026/1.038 (H100, stop 37 job 1).
    bool turns_unpipelined = pingpong_enabled();
    if (pipe && pipe->first_dot && stages_ < 3) {
      const DotOperands first = dot_operands(*pipe->first_dot);
      bool others = false;
      for (const ir::Inst* load : prefetched_loads(*loop))
        others = others || (load->results[0] != first.a && load->results[0] != first.b);
      if (!others) continue;
      if (!runs_alike(*loop) && !pipeline_varying_enabled()) {
        if (pingpong_mode() == "0" || !pingpong_possible(*loop)) continue;
        drop_pipeline(*loop);
        pipe = nullptr;
        turns_unpipelined = true;
      }
    }
    // Unpipelined: only where two warpgroups can take turns at the loop's dots.
    const bool pingpong = !pipe && turns_unpipelined && pingpong_possible(*loop);
    if (!pipe && !pingpong) continue;
    // Every value a round reads from outside it: the bounds, the slices' and loads' free
    // operands, the refs' block origins.
    const ir::ValueId index = loop->regions[0].args[0];
    std::set<ir::ValueId> needed{loop->operands[0], loop->operands[1]};
    for (const ir::Inst* load : prefetched_loads(*loop)) {
      const Prefetch& pf = prefetch.at(load->results[0]);
      std::set<ir::ValueId> local{index};
      for (const ir::Inst* d : pf.slice) local.insert(d->results.begin(), d->results.end());
      auto need = [&](const ir::Inst& in) {
        for (ir::ValueId o : in.operands)
          if (!local.count(o)) needed.insert(o);
      };
      for (const ir::Inst* d : pf.slice) need(*d);
      need(*load);
      for (ir::ValueId o : k_.refs.at(static_cast<size_t>(load->i0)).origin) needed.insert(o);
    }
    bool ok = true;
    for (ir::ValueId v : needed) ok = ok && known.count(v);
    if (!ok) continue;
    round_issue_[loop] = RoundIssue::Producer;
    producer_warps_ = 1;
    if (pingpong) {
      pingpong_loops_.insert(loop);
      std::vector<const ir::Inst*> dots;
      for (const ir::Inst& in : loop->regions[0].body)
        if (wgmma_dots_.count(&in)) dots.push_back(&in);
      turn_dots_[dots.front()] = {loop, Turn::EndsOne};
      turn_dots_[dots.back()] = {loop, Turn::BeginsOne};
    } else if (pipe && pipe->first_dot && threads_ == 256 && pipelined_pingpong_enabled()) {
      pingpong_loops_.insert(loop);
      turn_dots_[pipe->last_dot] = {loop, Turn::EndsPipelined};
    }
  }
  if (producer_warps_ == 0) return;
  choose_producer_homes(known);
  producer_scalars_ = std::move(scalars);
  // A producer warpgroup, of which one lane works, hands the registers of its other 127 threads to
  // the consumers. At one block per multiprocessor the entry count is the register file over the
  // block's threads (a multiple of 8: 168 for 384); the producer keeps 24.
  if (rebalance) {
    const int block = threads_ + 128;
    const int entry = 65536 / block / 8 * 8;
    producer_warps_ = 4;
    producer_regs_ = 24;
    consumer_regs_ = std::min(240, (entry * block - producer_regs_ * 128) / threads_ / 8 * 8);
  }
}

// The producer loads the TMA homes too where it can compute their loads (their indices and refs'
// origins from program ids and constants) and each stands at the top level: a persistent block's
// next program then finds its home (the attention forward's q block) loaded while the consumers
// finish the previous one. Each home goes back after the last top-level instruction reading it
// (or inside it: early_home_releases).
// Whether `in` or an instruction nested in it reads v (an operand, or a dot's operand tile), not
// counting `skip` (and what it holds).
bool Emitter::reads_value(const ir::Inst& in, ir::ValueId v, const ir::Inst* skip) const {
  if (&in == skip) return false;
  if (std::find(in.operands.begin(), in.operands.end(), v) != in.operands.end()) return true;
  if (in.op == ir::Op::Dot) {
    const DotOperands o = dot_operands(in);
    if (o.a == v || o.b == v) return true;
  }
  for (const ir::Region& r : in.regions)
    for (const ir::Inst& sub : r.body)
      if (reads_value(sub, v, skip)) return true;
  return false;
}

void Emitter::choose_producer_homes(const std::set<ir::ValueId>& known) {
  if (tma_homes_.empty()) return;
  const std::vector<ir::Inst>& top = k_.body.body;
  home_loads_.assign(tma_homes_.size(), nullptr);
  for (const ir::Inst& in : top)
    for (ir::ValueId r : in.results)
      if (auto it = tma_homes_.find(r); it != tma_homes_.end()) home_loads_[static_cast<size_t>(it->second)] = &in;
  for (const ir::Inst* load : home_loads_) {
    if (!load) return;  // loaded in a branch
    for (ir::ValueId o : load->operands)
      if (!known.count(o)) return;
    for (ir::ValueId o : k_.refs.at(static_cast<size_t>(load->i0)).origin)
      if (!known.count(o)) return;
  }
  for (const auto& [v, index] : tma_homes_) {
    const ir::Inst* last = home_loads_[static_cast<size_t>(index)];
    for (const ir::Inst& in : top)
      if (reads_value(in, v)) last = std::max(last, &in);
    home_releases_[last].push_back(index);
  }
  producer_homes_ = true;
}

bool Emitter::runs_alike(const ir::Inst& loop) const {
  return program_axes_of(loop.operands[0]).empty() && program_axes_of(loop.operands[1]).empty();
}

// Persistent blocks walk their programs in a fixed stride. Programs of one length share out alike
// at any stride; programs whose loops run longer along the axis walked fastest (the causal forward,
// its loop running to its q block) do only at a stride that walks every index of that axis, which
// the launch chooses (balance_length; stop 34 job 1 had them 6% slower at the resident count, whose
// stride visits a quarter of the axis). A home must come from the producer (the next program's copy
// waits for the consumers to give it back). PALLADIUM_CUDA_PERSISTENT=0 turns persistence off,
// =alike keeps it to programs of one length (stop 39's choice), =1 forces it wherever eligible,
// at the resident block count.
bool Emitter::persistent_eligible() const {
  const char* env = std::getenv("PALLADIUM_CUDA_PERSISTENT");
  const std::string mode = env ? env : "";
  if (producer_warps_ == 0 || mode == "0" || (!tma_homes_.empty() && !producer_homes_)) return false;
  bool alike = true;
  for (const auto& [loop, issue] : round_issue_)
    if (issue == RoundIssue::Producer) alike = alike && runs_alike(*loop);
  return alike || mode == "1" || balance_length() > 1;  // balance_length is 0 under any mode
}

// The length of the axis walked fastest where the producer's loops run alike except along it, and
// only by default (PALLADIUM_CUDA_PERSISTENT unset); 0 otherwise. Also 0 where the programs are
// too few to give each of kBalancedBlocks blocks length - 1 of them (balanced_blocks would then
// launch a block per program, and the persistent kernel run so was slower than the plain one:
// H100, stop 40 job 4, causal forward d128 s8192 blocks 128 x 128 0.990 -> 1.031 ms).
int64_t Emitter::balance_length() const {
  constexpr int64_t kBalancedBlocks = 128;  // about the blocks a Hopper runs at once (an SM each)
  const char* env = std::getenv("PALLADIUM_CUDA_PERSISTENT");
  if ((env && *env) || raster_group() > 0) return 0;
  const std::optional<std::vector<const ir::Inst*>> varying = ring_loops_along_fastest();  // persistent: a producer kernel
  if (!varying || varying->empty()) return 0;
  const std::vector<size_t> order = program_order();
  int64_t programs = 1;
  for (size_t d : order) programs *= k_.grid[d];
  const int64_t length = k_.grid[order.back()];
  return programs >= kBalancedBlocks * (length - 1) ? length : 0;
}

// The producer's loops (in a kernel without a producer, every loop with a TMA ring) whose bounds
// come from program ids, where each such bound comes from the axis walked fastest alone; nullopt
// where one comes from another axis (or from several).
std::optional<std::vector<const ir::Inst*>> Emitter::ring_loops_along_fastest() const {
  const std::vector<size_t> order = program_order();
  if (order.empty()) return std::nullopt;
  bool has_producer = false;
  for (const auto& [loop, ring] : tma_rings_) has_producer = has_producer || producer_serves(*loop);
  std::vector<const ir::Inst*> loops;
  for (const auto& [loop, ring] : tma_rings_) {
    if (has_producer && !producer_serves(*loop)) continue;
    const std::set<size_t> axes = program_axes_of(std::vector<ir::ValueId>{loop->operands[0], loop->operands[1]});  // its bounds
    if (axes.empty()) continue;
    if (axes.size() > 1 || *axes.begin() != order.back()) return std::nullopt;
    loops.push_back(loop);
  }
  return loops;
}

// Program n's homes, once the consumers gave back program n - 1's (the k-th completion of an empty
// barrier has parity (k - 1) & 1).
void Emitter::emit_producer_homes() {
  if (!producer_homes_) return;
  for (size_t h = 0; h < home_loads_.size(); ++h) {
    const ir::Inst& load = *home_loads_[h];
    const SmemTile& tile = smem_home.at(load.results[0]);
    const std::string index = std::to_string(h);
    open("");
    line("if (pl_block != pl_first_block) pl_mbar_wait(pl_home_empty" + index + ", pl_home_phase ^ 1u);");
    line("unsigned long long* const pl_bar = pl_home_bar" + index + ";");
    line("pl_mbar_expect_tx(pl_bar, " + std::to_string(tile.bytes()) + "u);");
    emit_tma_issue(load, "((pl_u16*)(pl_smem + " + std::to_string(tile.offset) + "))");
    close();
  }
  line("pl_home_phase ^= 1u;");
}

// After the last top-level instruction reading a home, its dots retired: each consumer warp gives
// the home back (a home that went back inside the loop, early_home_releases, only where the loop
// ran no iteration).
void Emitter::emit_home_release(const ir::Inst& in) {
  auto it = home_releases_.find(&in);
  if (it == home_releases_.end()) return;
  retire_dots();
  const std::vector<int> early = in.op == ir::Op::For ? early_home_releases(in) : std::vector<int>{};
  line("__syncwarp();");
  for (int h : it->second) {
    const bool ran_early = std::find(early.begin(), early.end(), h) != early.end();
    line(std::string(ran_early ? "if (pl_lane() == 0 && " + name(in.operands[1]) + "[0] <= " + name(in.operands[0]) + "[0])"
                               : "if (pl_lane() == 0)") +
         " pl_mbar_arrive(pl_home_empty" + std::to_string(h) + ");");
  }
}

// PALLADIUM_CUDA_EARLY_HOME_RELEASE=0 gives every home back after the loop (the form before stop
// 49). Read at each generation (tests set it).
namespace {
bool early_home_release_enabled() {
  const char* env = std::getenv("PALLADIUM_CUDA_EARLY_HOME_RELEASE");
  return !(env && std::string(env) == "0");
}
}  // namespace

// The persistent forward's q block is read by q k^T only, issued a round ahead: once the last one
// is retired (iteration hi - 2's wait<1>), the producer may bring in the next program's q while
// this program's last iteration runs, instead of after both warpgroups left the loop.
std::vector<int> Emitter::early_home_releases(const ir::Inst& loop) const {
  std::vector<int> homes;
  const PipelinedLoop* pipe = pipelined_loop(loop);
  const TmaRing* ring = tma_ring(loop);
  auto it = home_releases_.find(&loop);
  if (!early_home_release_enabled() || it == home_releases_.end() || !pipe || !pipe->first_dot || !ring ||
      !ring->split || !producer_serves(loop))
    return homes;
  for (int h : it->second) {
    const ir::ValueId v = home_loads_[static_cast<size_t>(h)]->results[0];
    if (reads_value(*pipe->first_dot, v) && !reads_value(loop, v, pipe->first_dot)) homes.push_back(h);
  }
  return homes;
}

// Each consumer warp gives the loop's early homes back where `condition` holds: its first dots
// retired by the caller, right after a slot release (whose __syncwarp it shares: a block of its
// own there, with a second __syncwarp, cost the d128 forward at blocks 128 x 64 2-6% on an H200).
void Emitter::emit_early_home_release(const ir::Inst& loop, const std::string& condition) {
  for (int h : early_home_releases(loop))
    line("if (pl_lane() == 0 && " + condition + ") pl_mbar_arrive(pl_home_empty" + std::to_string(h) + ");");
}

// A pipelined attention loop (first dot a round ahead) is pipelined at two stages only where the
// producer serves it: there each slot comes back on its own barriers, and no prefetch distance of
// stages - 2 is needed.
void Emitter::drop_short_pipelines() {
  if (stages_ >= 3) return;
  std::vector<const ir::Inst*> dropped;
  for (const auto& [loop, pipe] : pipelined_)
    if (pipe.first_dot && !producer_serves(*loop)) dropped.push_back(loop);
  for (const ir::Inst* loop : dropped) drop_pipeline(*loop);
}

// The loop runs unpipelined: its dots issue in program order again.
void Emitter::drop_pipeline(const ir::Inst& loop) {
  auto it = pipelined_.find(&loop);
  if (it == pipelined_.end()) return;
  pipelined_by_dot_.erase(it->second.last_dot);
  if (it->second.first_dot) {  // the attention shape; a K loop has its one dot only
    pipelined_by_dot_.erase(it->second.first_dot);
    in_place_.erase(it->second.carry_reader->results[0]);
  }
  pipelined_.erase(it);
}

// Two consumer warpgroups can take turns at an unpipelined loop's dots (two or more of them).
bool Emitter::pingpong_possible(const ir::Inst& loop) const {
  int body_dots = 0;
  for (const ir::Inst& in : loop.regions[0].body) body_dots += wgmma_dots_.count(&in) ? 1 : 0;
  return threads_ == 256 && body_dots >= 2;
}

// A served pipelined attention loop: at the end of iteration i its q k^T of iteration i + 1 is
// retired, while p v of iteration i still reads V. With one barrier per slot, K's buffer of
// iteration i + 1 would wait for V's, so the ring's next use of that slot could start only when
// p v of iteration i + 1 retires. Split, K's slot goes back a round earlier than V's (the
// FlashAttention-3 arrangement), which is what lets the loop run on two stages (head_dim 128,
// blocks 128 x 128, where a third does not fit).
void Emitter::split_served_rings() {
  int set = 0;
  for (auto& [loop, ring] : tma_rings_) {
    ring.first_set = set;
    const PipelinedLoop* pipe = pipelined_loop(*loop);
    if (producer_serves(*loop) && pipe && pipe->first_dot) {
      ring.split = true;
      ring.group_bytes[0] = ring.group_bytes[1] = 0;
      for (const ir::Inst* load : prefetched_loads(*loop))
        ring.group_bytes[load_group(*loop, *load)] += smem_home.at(load->results[0]).bytes();
      if (ring.group_bytes[0] == 0 || ring.group_bytes[1] == 0) ring.split = false;  // nothing to split
    }
    set += ring.split ? 2 : 1;
  }
}

// The producer's first lane: the scalars, then each served loop's rounds in program order, a
// slot's refill waiting for the consumers' arrivals of its previous use (the k-th refill of a slot
// waits for the k-th completion of its empty barrier, of parity (k - 1) & 1). A split ring's
// round goes out as its two groups, each after its own slot's arrivals.
std::string Emitter::producer_code() {
  if (producer_warps_ == 0) return "";
  std::ostringstream consumers;
  consumers.swap(body_);
  const int indent = indent_;
  indent_ = 3;
  tma_issuer_ = "true";
  for (const ir::Inst* in : producer_scalars_) emit_inst_body(*in);
  emit_producer_homes();
  for (const ir::Inst& loop : k_.body.body) {
    if (!producer_serves(loop)) continue;
    const std::string lo = name(loop.operands[0]) + "[0]", hi = name(loop.operands[1]) + "[0]";
    const std::string s = std::to_string(stages_), r = std::to_string(tma_ring(loop)->index);
    // The refill of use `u` (C++ text) of `group`'s slot, after the consumers gave back its previous use.
    auto refill = [&](int group, const std::string& u, const std::string& iteration) {
      const std::string e = "pl_empty" + std::to_string(barrier_set(loop, group));
      line("if (" + u + " >= " + s + ") pl_mbar_wait(&" + e + "[(" + u + ") % " + s + "], (unsigned)(((" + u + ") / " + s +
           " - 1) & 1));");
      emit_prefetch_round(loop, "pl_nx", iteration, tma_ring(loop)->split ? group : -1);
    };
    const bool split = tma_ring(loop)->split;
    // Split, K's tiles go out a round ahead of V's: K's slot comes back a round earlier.
    if (split) {
      open("if (" + lo + " < " + hi + ")");
      refill(0, "pl_base" + r, lo);
      close();
    }
    open("for (" + reg_type(type(loop.regions[0].args[0]).dtype) + " pl_p = " + lo + "; pl_p < " + hi + "; ++pl_p)");
    line("const int pl_use = pl_base" + r + " + (int)(pl_p - " + lo + ");  // uses of the ring so far");
    if (split) {
      open("if (pl_p + 1 < " + hi + ")");
      refill(0, "pl_use + 1", "pl_p + 1");
      close();
    }
    refill(split ? 1 : 0, "pl_use", "pl_p");
    close();
    line("if (" + hi + " > " + lo + ") pl_base" + r + " += (int)(" + hi + " - " + lo + ");");
  }
  tma_issuer_ = "pl_tid() == 0";
  indent_ = indent;
  consumers.swap(body_);
  return consumers.str();
}

// The end of iteration i of a served loop. Pipelined (a K loop), iteration i - 1's dot is retired,
// so its slot goes back to the producer, one arrival per consumer warp; unpipelined, iteration i's
// own dots are (emit_region retires them at the body's end). Split (an attention loop), q k^T of
// iteration i + 1 is retired (the last dot's wait<1>), so K's slot of i + 1 goes back, and V's of
// i - 1 (its p v was retired where the accumulator was read in this iteration). V's release there,
// right after that wait, was no faster (H100, stop 33 job 2) and made ptxas serialise the wgmma of
// the block_k 64 loop (C7520) with the H100 machine's NVRTC.
void Emitter::emit_consumer_release(const ir::Inst& loop) {
  const std::string i = name(loop.regions[0].args[0]) + "[0]", lo = name(loop.operands[0]) + "[0]";
  if (!pipelined_loop(loop)) {
    emit_slot_release(loop, 0, i);
    return;
  }
  const bool split = tma_ring(loop)->split;
  if (split) {
    open("if (" + i + " + 1 < " + name(loop.operands[1]) + "[0])");
    emit_slot_release(loop, 0, i + " + 1");
    emit_early_home_release(loop, i + " + 2 == " + name(loop.operands[1]) + "[0]");  // the last q k^T retired
    close();
  }
  open("if (" + i + " > " + lo + ")");
  emit_slot_release(loop, split ? 1 : 0, i + " - 1");
  close();
}

void Emitter::emit_slot_release(const ir::Inst& loop, int group, const std::string& iteration) {
  line("__syncwarp();");
  const std::string slot = "&pl_empty" + std::to_string(barrier_set(loop, group)) + "[" + ring_slot(loop, iteration) + "]";
  if (cluster_ > 1)  // the other block's producer writes this block's slots too (emit_cluster.cc)
    line("if (pl_lane() == 0) { pl_mbar_arrive(" + slot + "); pl_mbar_arrive_cluster(" + slot + ", pl_cta_rank ^ 1u); }");
  else
    line("if (pl_lane() == 0) pl_mbar_arrive(" + slot + ");");
}

// After the loop, its last dot retired: a pipelined loop's last slot goes back too (a later run of
// the loop, for the block's next program, refills it; split, only V's: K's went back in the
// loop), and the ring's count moves on.
void Emitter::emit_consumer_loop_end(const ir::Inst& loop) {
  const std::string lo = name(loop.operands[0]) + "[0]", hi = name(loop.operands[1]) + "[0]";
  const TmaRing& ring = *tma_ring(loop);
  open("if (" + hi + " > " + lo + ")");
  if (pipelined_loop(loop)) emit_slot_release(loop, ring.split ? 1 : 0, hi + " - 1");
  line("pl_base" + std::to_string(ring.index) + " += (int)(" + hi + " - " + lo + ");");
  close();
}

// Around a ping-pong loop: warpgroup 1 hands the first turn to warpgroup 0 before it (before a
// pipelined loop's prologue, whose first dot is a turn); after it, in the unpipelined loop each
// warpgroup ends the turn its last dot began (where the loop ran), and warpgroup 0 takes back
// warpgroup 1's last pass, so that every arrival on the turn barriers has its wait and a later run
// of the loop starts afresh.
void Emitter::emit_turns_open(const ir::Inst& loop) {
  if (pingpong_loops_.count(&loop)) line("if ((pl_warp() >> 2) == 1) pl_turn_pass(1);");
}

void Emitter::emit_turns_close(const ir::Inst& loop) {
  if (!pingpong_loops_.count(&loop)) return;
  const PipelinedLoop* pipe = pipelined_loop(loop);
  if (!pipe)  // the unpipelined loop's last turn, begun at its last p v, is still open
    line("if (" + name(loop.operands[1]) + "[0] > " + name(loop.operands[0]) + "[0]) pl_turn_pass(pl_warp() >> 2);");
  line("if ((pl_warp() >> 2) == 0) pl_turn_wait(0);");
}

void Emitter::emit_turn_wait(const ir::Inst& dot) {
  auto it = turn_dots_.find(&dot);
  if (it == turn_dots_.end() || it->second.turn == Turn::EndsPipelined) return;
  const ir::Inst& loop = *it->second.loop;
  if (it->second.turn == Turn::EndsOne)  // the first iteration's first dot begins a turn too
    line("if (" + name(loop.regions[0].args[0]) + "[0] == " + name(loop.operands[0]) + "[0]) pl_turn_wait(pl_wg);");
  else
    line("pl_turn_wait(pl_wg);");
}

void Emitter::emit_turn_pass(const ir::Inst& dot) {
  auto it = turn_dots_.find(&dot);
  if (it != turn_dots_.end() && it->second.turn != Turn::BeginsOne) line("pl_turn_pass(pl_wg);");
}

bool Emitter::pipelined_turns(const PipelinedLoop& p) const {
  auto it = turn_dots_.find(p.last_dot);
  return it != turn_dots_.end() && it->second.turn == Turn::EndsPipelined;
}

}  // namespace palladium::cuda
