// The staged gufunc path's planner (host only): when it applies, instances per tile, team size,
// shared-memory layout (16-byte aligned, bank-padded pitches) and the 16-byte copy decision.
#include <spillway/map/detail/gufunc_plan.hpp>
#include <spillway/map/signature.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

using spillway::index_t;
using spillway::detail::gufunc_stage_input;
using spillway::detail::shape_and_strides;

namespace {

shape_and_strides dense(const std::vector<index_t>& shape) {
  std::vector<index_t> st(shape.size());
  index_t s = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    st[d] = s;
    s *= shape[d] > 0 ? shape[d] : 1;
  }
  return {shape, st};
}

spillway::detail::gufunc_stage_plan plan(const char* sig, const std::vector<shape_and_strides>& in,
                                         const std::vector<gufunc_stage_input>& si) {
  const auto p = spillway::detail::plan_gufunc(spillway::parse_signature(sig), in, nullptr);
  return spillway::detail::plan_gufunc_stage(p, si);
}

constexpr std::uintptr_t kAligned = 0x10000;

}  // namespace

TEST(GufuncStagePlan, RowDotOfSixtyFourFloats) {
  const auto sp = plan("(n),(n)->()", {dense({1000000, 64}), dense({1000000, 64})},
                       {{true, 4, kAligned}, {true, 4, kAligned + 256000000}});
  ASSERT_TRUE(sp.ok);
  EXPECT_EQ(sp.per_block, 32);
  EXPECT_EQ(sp.team, 8);
  ASSERT_EQ(sp.ops.size(), 3u);
  EXPECT_FALSE(sp.ops[0].staged);
  for (int k : {1, 2}) {
    EXPECT_TRUE(sp.ops[k].staged);
    EXPECT_TRUE(sp.ops[k].vec16);
    EXPECT_EQ(sp.ops[k].pitch, 72);  // 64 + 8: the 4 teams of a warp read banks 0-7, 8-15, ...
  }
  EXPECT_EQ(sp.ops[1].offset, 0);
  EXPECT_EQ(sp.ops[2].offset, 32 * 72 * 4);
  EXPECT_EQ(sp.smem_bytes, 2 * 32 * 72 * 4);
}

TEST(GufuncStagePlan, PitchesAreAlignedAndBankPadded) {
  for (index_t n : {1, 3, 63, 64, 65, 100, 1000}) {
    for (std::size_t es : {std::size_t{4}, std::size_t{8}}) {
      const auto sp = plan("(n),(n)->()", {dense({777, n}), dense({777, n})}, {{true, es, kAligned}, {true, es, kAligned}});
      if (n == 1000 && es == 8) {  // 8 instances of 2 x 8000 bytes exceed gufunc_stage_max_bytes
        EXPECT_FALSE(sp.ok);
        continue;
      }
      ASSERT_TRUE(sp.ok) << n;
      EXPECT_EQ(sp.team * sp.per_block, spillway::detail::gufunc_stage_block);
      EXPECT_GE(sp.per_block, 8);
      EXPECT_LE(sp.smem_bytes, spillway::detail::gufunc_stage_max_bytes);
      for (int k : {1, 2}) {
        const auto& o = sp.ops[static_cast<std::size_t>(k)];
        EXPECT_GE(o.pitch, n);
        EXPECT_EQ(o.pitch * static_cast<index_t>(es) % 16, 0) << n;
        EXPECT_EQ(o.offset % 16, 0);
        const index_t words = o.pitch * static_cast<index_t>(es) / 4;
        const index_t step = (static_cast<index_t>(sp.team) * static_cast<index_t>(es) / 4 + 3) / 4 * 4;
        EXPECT_EQ(words % 32, step % 32) << "n=" << n << " es=" << es;
      }
      // Rows of n elements keep 16-byte alignment only when n * es is a multiple of 16.
      EXPECT_EQ(sp.ops[1].vec16, (n * static_cast<index_t>(es)) % 16 == 0) << n;
    }
  }
}

TEST(GufuncStagePlan, FallsBackWhereItDoesNotApply) {
  // A transposed (column) core.
  EXPECT_FALSE(plan("(n),(n)->()", {{{1000, 64}, {1, 1000}}, dense({1000, 64})}, {{true, 4, kAligned}, {true, 4, kAligned}}).ok);
  // Too big for 8 instances in shared memory.
  EXPECT_FALSE(plan("(n),(n)->()", {dense({100, 5003}), dense({100, 5003})}, {{true, 4, kAligned}, {true, 4, kAligned}}).ok);
  // No instances.
  EXPECT_FALSE(plan("(n),(n)->()", {dense({0, 64}), dense({0, 64})}, {{true, 4, kAligned}, {true, 4, kAligned}}).ok);
  // Only scalars.
  EXPECT_FALSE(plan("(),()->()", {dense({}), dense({})}, {{false, 4, 0}, {false, 4, 0}}).ok);
  // An element size the asynchronous copies cannot move.
  EXPECT_FALSE(plan("(n)->()", {dense({10, 64})}, {{true, 2, kAligned}}).ok);
}

TEST(GufuncStagePlan, BroadcastScalarsAndMisalignment) {
  // (5,1,64) with (7,64): loop stride 0 along one dimension still allows 16-byte copies.
  auto sp = plan("(n),(n)->()", {dense({5, 1, 64}), dense({7, 64})}, {{true, 4, kAligned}, {true, 4, kAligned}});
  ASSERT_TRUE(sp.ok);
  EXPECT_TRUE(sp.ops[1].vec16 && sp.ops[2].vec16);
  // A scalar input is not staged and takes no shared memory.
  sp = plan("(n),()->()", {dense({10, 64}), dense({})}, {{true, 8, kAligned}, {false, 8, 0}});
  ASSERT_TRUE(sp.ok);
  EXPECT_FALSE(sp.ops[2].staged);
  EXPECT_EQ(sp.smem_bytes, static_cast<index_t>(sp.per_block) * sp.ops[1].pitch * 8);
  // A base 4 bytes past a 16-byte boundary: element-sized copies.
  sp = plan("(n)->()", {dense({10, 64})}, {{true, 4, kAligned + 4}});
  ASSERT_TRUE(sp.ok);
  EXPECT_FALSE(sp.ops[1].vec16);
  // Rows of 63 floats 65 elements apart: a loop stride that is not a multiple of 16 bytes.
  sp = plan("(n)->()", {{{10, 63}, {65, 1}}}, {{true, 4, kAligned}});
  ASSERT_TRUE(sp.ok);
  EXPECT_FALSE(sp.ops[1].vec16);
}

TEST(GufuncStagePlan, TileBuffers) {
  using spillway::detail::gufunc_stage_buffers;
  constexpr index_t h200_optin = 232448;  // 227 KiB, the H100/H200 per-block opt-in maximum
  constexpr index_t a100_optin = 166912;  // 163 KiB
  // The row dot: 18 KiB per slot set, so two fit anywhere; automatic picks one slot per team
  // (measured faster on the H200), a forced 2 gets two where they fit.
  const auto dot = plan("(n),(n)->()", {dense({1000000, 64}), dense({1000000, 64})},
                        {{true, 4, kAligned}, {true, 4, kAligned}});
  ASSERT_TRUE(dot.ok);
  EXPECT_EQ(gufunc_stage_buffers(dot, 0, h200_optin), 1);
  EXPECT_EQ(gufunc_stage_buffers(dot, 0, 2 * dot.smem_bytes - 1), 1);
  EXPECT_EQ(gufunc_stage_buffers(dot, 2, h200_optin), 2);
  EXPECT_EQ(gufunc_stage_buffers(dot, 1, h200_optin), 1);
  EXPECT_EQ(gufunc_stage_buffers(dot, 2, 48 * 1024), 2);
  EXPECT_EQ(gufunc_stage_buffers(dot, 2, 2 * dot.smem_bytes), 2);      // exactly fits
  EXPECT_EQ(gufunc_stage_buffers(dot, 2, 2 * dot.smem_bytes - 1), 1);  // one byte short
  // 1000 floats per core: 8 instances x 2 x 4 KiB = 64 KiB per slot set. Two fit 227 KiB, not
  // 96 KiB; a forced 2 falls back to one where two do not fit.
  const auto big = plan("(n),(n)->()", {dense({777, 1000}), dense({777, 1000})}, {{true, 4, kAligned}, {true, 4, kAligned}});
  ASSERT_TRUE(big.ok);
  EXPECT_EQ(big.smem_bytes, 2 * 8 * 1024 * 4);
  EXPECT_EQ(gufunc_stage_buffers(big, 0, h200_optin), 1);
  EXPECT_EQ(gufunc_stage_buffers(big, 0, 96 * 1024), 1);
  EXPECT_EQ(gufunc_stage_buffers(big, 2, h200_optin), 2);
  EXPECT_EQ(gufunc_stage_buffers(big, 2, a100_optin), 2);
  EXPECT_EQ(gufunc_stage_buffers(big, 2, 96 * 1024), 1);
  EXPECT_EQ(gufunc_stage_buffers(big, 1, h200_optin), 1);
  // Not staged: no buffers, whatever is asked.
  const auto none = plan("(n),(n)->()", {dense({0, 64}), dense({0, 64})}, {{true, 4, kAligned}, {true, 4, kAligned}});
  EXPECT_EQ(gufunc_stage_buffers(none, 0, h200_optin), 0);
  EXPECT_EQ(gufunc_stage_buffers(none, 2, h200_optin), 0);
  // Out of range: logic_error naming the field and the value.
  for (int bad : {-1, 3, 17}) {
    try {
      (void)gufunc_stage_buffers(dot, bad, h200_optin);
      ADD_FAILURE() << "stage_buffers " << bad << " did not throw";
    } catch (const spillway::logic_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("stage_buffers"), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(bad)), std::string::npos) << what;
    }
  }
}

// The planner merges loop dimensions the operands walk contiguously; every instance's offsets
// must be what the uncollapsed digits give (checked against a hand computation of the original).
TEST(GufuncLoopCollapse, MergesOnlyWhereEveryOperandChains) {
  using spillway::detail::loop_offsets;
  namespace d = spillway::detail;
  const auto sig = spillway::parse_signature("(n),(n)->()");
  // (6, 5, 7, n) contiguous with (5, 7, n) broadcast over the outer dim: the inner two loop dims
  // chain for all three operands (output (6,5,7) contiguous too); the outer one does not for b.
  const index_t n = 3;
  auto p = d::plan_gufunc(sig, {dense({6, 5, 7, n}), dense({5, 7, n})}, nullptr);
  ASSERT_EQ(p.loop_rank, 2);
  EXPECT_EQ(p.loop_extents[0], 6);
  EXPECT_EQ(p.loop_extents[1], 35);
  EXPECT_EQ(p.binding.loop_shape, (std::vector<index_t>{6, 5, 7}));  // what callers see is unchanged
  for (index_t inst = 0; inst < 6 * 35; ++inst) {
    const index_t i0 = inst / 35, i1 = inst / 7 % 5, i2 = inst % 7;
    index_t off[3];
    loop_offsets(inst, p.loop_rank, p.loop_extents, p.ops.data(), off);
    EXPECT_EQ(off[0], inst) << inst;                             // output (6,5,7)
    EXPECT_EQ(off[1], ((i0 * 5 + i1) * 7 + i2) * n) << inst;   // a (6,5,7,n)
    EXPECT_EQ(off[2], (i1 * 7 + i2) * n) << inst;              // b (5,7,n), broadcast over i0
  }
  // Fully contiguous loops collapse to rank 1; size-1 loop dimensions vanish.
  p = d::plan_gufunc(sig, {dense({4, 1, 9, n}), dense({4, 1, 9, n})}, nullptr);
  ASSERT_EQ(p.loop_rank, 1);
  EXPECT_EQ(p.loop_extents[0], 36);
  EXPECT_EQ(p.ops[1].loop_strides[0], n);
  // A transposed operand (strides not chaining) keeps its dimensions apart.
  p = d::plan_gufunc(sig, {{{4, 9, n}, {n, 4 * n, 1}}, dense({4, 9, n})}, nullptr);
  ASSERT_EQ(p.loop_rank, 2);
  for (index_t inst = 0; inst < 36; ++inst) {
    index_t off[3];
    loop_offsets(inst, p.loop_rank, p.loop_extents, p.ops.data(), off);
    EXPECT_EQ(off[1], (inst / 9) * n + (inst % 9) * 4 * n) << inst;
    EXPECT_EQ(off[2], inst * n) << inst;
  }
  // All loop dimensions of size 1: rank 0, one instance at offset 0.
  p = d::plan_gufunc(sig, {dense({1, 1, n}), dense({n})}, nullptr);
  EXPECT_EQ(p.loop_rank, 0);
  EXPECT_EQ(p.instances, 1);
  index_t off[3] = {-1, -1, -1};
  loop_offsets(index_t{0}, p.loop_rank, p.loop_extents, p.ops.data(), off);
  EXPECT_EQ(off[0], 0);
  EXPECT_EQ(off[1], 0);
  EXPECT_EQ(off[2], 0);
}
