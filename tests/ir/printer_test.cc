// The IR printer: a small kernel's text holds the expected lines (header, refs with their blocks,
// typed instructions, regions, memory ops with masks and strides); debug=true prints it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "palladium/palladium.h"

namespace palladium {
namespace {

namespace pl = palladium;
namespace jnp = palladium::jnp;
using ::testing::HasSubstr;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

// Whether consecutive lines of `text` match the patterns in order (each pattern matches a whole
// line, ECMAScript syntax; "%N" stands for any value id).
::testing::AssertionResult has_lines(const std::string& text, const std::vector<std::string>& patterns) {
  std::vector<std::regex> res;
  for (std::string p : patterns) {
    for (size_t at = p.find("%N"); at != std::string::npos; at = p.find("%N", at)) p.replace(at, 2, "%[0-9]+");
    res.emplace_back(p);
  }
  const std::vector<std::string> lines = lines_of(text);
  for (size_t first = 0; first + res.size() <= lines.size(); ++first) {
    size_t k = 0;
    while (k < res.size() && std::regex_match(lines[first + k], res[k])) ++k;
    if (k == res.size()) return ::testing::AssertionSuccess();
  }
  std::string want;
  for (const std::string& p : patterns) want += "  " + p + "\n";
  return ::testing::AssertionFailure() << "no consecutive lines match\n" << want << "in\n" << text;
}

void small_kernel(Ref x, Ref y, Ref o) {
  Value s = pl::fori_loop(0, 4, [&](Value i, Value c) { return c + y(i, pl::slice()); }, jnp::zeros({8}));
  Value m = pl::load(x, pl::idx(pl::ds(pl::program_id(0) * 2, 4, 2)), jnp::arange(4) < 3, Value(0.0f));
  pl::when(m.sum() > 0, [&] { pl::debug_print("m {}", m); });
  Value d = pl::dot(Value(x[pl::all])(pl::None, pl::slice()), s(pl::None, pl::slice()), false, true);
  o[pl::all] = d.reshape({});
}

Callable<Array> small_call(bool debug = false) {
  return pallas_call(small_kernel, ShapeDtype({2}, f32),
                     {.grid = {2},
                      .in_specs = {BlockSpec(), BlockSpec({4, 8}, [](Index i) { return pl::idx(i, 0); })},
                      .out_specs = {BlockSpec({pl::None}, [](Index i) { return i; })},
                      .name = "small",
                      .debug = debug,
                      .backend = "interpret"});
}

TEST(Printer, SmallKernel) {
  const std::string ir = small_call().lower({ShapeDtype({8}, f32), ShapeDtype({8, 8}, f32)});
  const std::vector<std::string> lines = lines_of(ir);
  ASSERT_GE(lines.size(), 10u) << ir;
  // The header, then one line per ref: the kernel-visible type, direction, block and array, and
  // the values holding the block's origin.
  EXPECT_TRUE(has_lines(ir, {R"(kernel small grid=\(2,\))",
                             R"(  ref x0: f32\[8\] in <- block \(8,\) of f32\[8\] at \(%N\))",
                             R"(  ref x1: f32\[4,8\] in <- block \(4, 8\) of f32\[8,8\] at \(%N, %N\))",
                             R"(  ref o0: f32\[\] out <- block \(1,\) of f32\[2\] at \(%0\))",
                             R"(  %0:i32\[\] = program_id axis=0)"}));
  // Typed results, constants, the loop with its region and yield.
  EXPECT_TRUE(has_lines(ir, {R"(  %N:f32\[8\] = const 0\.000000)"}));
  EXPECT_TRUE(has_lines(ir, {R"(  %N:f32\[8\] = for %N, %N, %N)",
                             R"(    body\(%N, %N\):)",
                             R"(      %N:i32\[\] = const 0)",
                             R"(      %N:f32\[8\] = load x1\[%N, %N:\+8\])",
                             R"(      %N:f32\[8\] = add %N, %N)",
                             R"(      yield %N)"}));
  // A strided, masked load with `other`.
  EXPECT_TRUE(has_lines(ir, {R"(  %N:i32\[4\] = iota axis=0)", R"(  %N:i32\[4\] = const 3)", R"(  %N:i1\[4\] = lt %N, %N)"}));
  EXPECT_TRUE(has_lines(ir, {R"(  %N:f32\[4\] = load x0\[%N:\+4:2\] mask=%N other=%N)"}));
  // pl::when: an if with no results; debug_print carries its format.
  EXPECT_TRUE(has_lines(ir, {R"(  %N:f32\[\] = reduce_sum axis=0 %N)"}));
  EXPECT_TRUE(has_lines(ir, {R"(  if %N)", R"(    then\(\):)", R"(      debug_print %N "m \{\}")", R"(      yield)",
                             R"(    else\(\):)", R"(      yield)"}));
  EXPECT_TRUE(has_lines(ir, {R"(  %N:f32\[1,1\] = dot %N, %N trans_b)"}));
  EXPECT_TRUE(std::regex_match(lines.back(), std::regex(R"(  store o0\[\] <- %[0-9]+)"))) << lines.back();
}

TEST(Printer, LayoutOpsShowTheirAttributes) {
  auto f = pallas_call(
      [](Ref x, Ref o1, Ref o2, Ref o3) {
        Value v = x[pl::all];
        o1[pl::all] = v.T();
        o2[pl::all] = v(pl::all, pl::None).broadcast_to({4, 6, 5});
        o3[pl::all] = jnp::cumsum(v, 0).argmax(1);
      },
      {ShapeDtype({6, 4}, f32), ShapeDtype({4, 6, 5}, f32), ShapeDtype({4}, i32)}, {.name = "layout", .backend = "interpret"});
  const std::string ir = f.lower({ShapeDtype({4, 6}, f32)});
  EXPECT_TRUE(has_lines(ir, {R"(kernel layout grid=\(\))"}));
  EXPECT_TRUE(has_lines(ir, {R"(  %N:f32\[6,4\] = transpose %N dims=\(1,0\))"}));
  EXPECT_TRUE(has_lines(ir, {R"(  %N:f32\[4,6,1\] = reshape %N)", R"(  %N:f32\[4,6,5\] = broadcast %N dims=\(0,1,2\))"}));
  EXPECT_TRUE(has_lines(ir, {R"(  %N:f32\[4,6\] = cumsum axis=0 %N)", R"(  %N:i32\[4\] = argmax axis=1 %N)"}));
}

TEST(Printer, WhileAndCondRegionsAndAtomics) {
  auto f = pallas_call(
      [](Ref x, Ref o, Ref old) {
        Value n = pl::while_loop([](Value c) { return c < 10; }, [](Value c) { return c * 2; }, Value(x[0]));
        Value r = pl::cond(n > 5, [&] { return n + 1; }, [&] { return n - 1; });
        old[pl::all] = pl::atomic_add(o, pl::idx(0), r);
      },
      {ShapeDtype({4}, i32), ShapeDtype({}, i32)}, {.input_output_aliases = {{0, 0}}, .name = "regions", .backend = "interpret"});
  const std::string ir = f.lower({ShapeDtype({4}, i32)});
  EXPECT_TRUE(has_lines(ir, {R"(  ref o1: i32\[\] out <- block \(\) of i32\[\])"}));
  EXPECT_TRUE(has_lines(ir, {R"(  %N:i32\[\] = while %N)", R"(    cond\(%N\):)", R"(      %N:i32\[\] = const 10)",
                             R"(      %N:i1\[\] = lt %N, %N)", R"(      yield %N)", R"(    body\(%N\):)"}));
  EXPECT_TRUE(has_lines(ir, {R"(  %N:i32\[\] = if %N)", R"(    then\(\):)"}));
  EXPECT_TRUE(has_lines(ir, {R"(  %N:i32\[\] = atomic_add o0\[%N\] <- %N)", R"(  store o1\[\] <- %N)"}));
}

// debug=true prints the traced IR once, when the call traces.
TEST(Printer, DebugOptionPrintsTheIR) {
  auto f = small_call(/*debug=*/true);
  Array x = random::normal(random::key(1), {8}), y = random::normal(random::key(2), {8, 8});
  ::testing::internal::CaptureStdout();
  f(x, y);
  f(x, y);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(out, HasSubstr("--- pallas_call 'small' IR (interpret) ---\nkernel small grid=(2,)\n"));
  EXPECT_EQ(out.find("--- pallas_call"), out.rfind("--- pallas_call")) << "printed more than once:\n" << out;
  EXPECT_THAT(out, HasSubstr(f.lower({ShapeDtype({8}, f32), ShapeDtype({8, 8}, f32)})));
}

TEST(Printer, TypeStrings) {
  EXPECT_EQ(ir::type_str({f32, {128, 64}}), "f32[128,64]");
  EXPECT_EQ(ir::type_str({i32, {}}), "i32[]");
  EXPECT_EQ(ir::type_str({bool_, {3}}), "i1[3]");
  EXPECT_EQ(ir::type_str({bf16, {2, 1}}), "bf16[2,1]");
  EXPECT_STREQ(ir::op_name(ir::Op::ReduceSum), "reduce_sum");
  EXPECT_STREQ(ir::op_name(ir::Op::AtomicMin), "atomic_min");
  EXPECT_EQ(ir::op_family(ir::Op::Cumsum), ir::Family::Scan);
  EXPECT_EQ(ir::op_family(ir::Op::Yield), ir::Family::Control);
}

}  // namespace
}  // namespace palladium
