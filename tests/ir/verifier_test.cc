// The IR verifier on hand-built kernels: a well-formed kernel passes; each broken invariant is an
// InternalError (a bug in tracing or a pass, never a user Error) naming the kernel and the problem,
// followed by the printed IR.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "ir/ir.h"
#include "palladium/error.h"
#include "tests/support/test_support.h"

namespace palladium::ir {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// The message of the InternalError that verify throws, or a marker saying what happened instead.
std::string verify_error(const Kernel& k) { return test_support::error_message<InternalError>([&] { verify(k); }); }

// A kernel under construction by hand: values get types in order, instructions are appended.
struct Hand {
  Kernel k;
  Hand() { k.name = "hand"; }
  ValueId value(Type t) {
    k.types.push_back(std::move(t));
    return static_cast<ValueId>(k.types.size() - 1);
  }
  static Inst constant(ValueId r) { return Inst{.op = Op::Const, .results = {r}}; }
  static Inst binary(Op op, ValueId r, ValueId a, ValueId b) { return Inst{.op = op, .results = {r}, .operands = {a, b}}; }
  static Inst yield(std::vector<ValueId> v) { return Inst{.op = Op::Yield, .operands = std::move(v)}; }
  // A for loop: lo, hi (i32 scalars), one f32[4] carry; `yields` are the body's yield operands.
  ValueId for_loop(std::vector<ValueId> (*yields)(ValueId index, ValueId carry), ValueId* body_value = nullptr) {
    const Type i32s{i32, {}}, f4{f32, {4}};
    ValueId lo = value(i32s), hi = value(i32s), init = value(f4);
    k.body.body.push_back(constant(lo));
    k.body.body.push_back(constant(hi));
    k.body.body.push_back(constant(init));
    Region body;
    ValueId i = value(i32s), c = value(f4), d = value(f4);
    body.args = {i, c};
    body.body.push_back(binary(Op::Add, d, c, c));
    body.body.push_back(yield(yields(i, d)));
    if (body_value) *body_value = d;
    ValueId r = value(f4);
    k.body.body.push_back(Inst{.op = Op::For, .results = {r}, .operands = {lo, hi, init}, .regions = {std::move(body)}});
    return r;
  }
};

TEST(Verifier, WellFormedKernelPasses) {
  Hand h;
  ValueId a = h.value({f32, {4}}), b = h.value({f32, {4}}), c = h.value({f32, {4}});
  h.k.body.body = {Hand::constant(a), Hand::constant(b), Hand::binary(Op::Add, c, a, b)};
  EXPECT_EQ(verify_error(h.k), "<no InternalError thrown>");
  Hand loop;
  loop.for_loop([](ValueId, ValueId carry) { return std::vector<ValueId>{carry}; });
  EXPECT_EQ(verify_error(loop.k), "<no InternalError thrown>");
}

TEST(Verifier, UseBeforeDefinition) {
  Hand h;
  ValueId a = h.value({f32, {4}}), b = h.value({f32, {4}}), c = h.value({f32, {4}});
  h.k.body.body = {Hand::constant(a), Hand::binary(Op::Add, c, a, b), Hand::constant(b)};
  EXPECT_THAT(verify_error(h.k), AllOf(HasSubstr("IR verifier, kernel 'hand'"), HasSubstr("add uses %1 before its definition"),
                                       HasSubstr("kernel hand grid=()")));
}

TEST(Verifier, BadYieldCount) {
  Hand h;
  h.for_loop([](ValueId, ValueId carry) { return std::vector<ValueId>{carry, carry}; });
  EXPECT_THAT(verify_error(h.k), AllOf(HasSubstr("kernel 'hand'"), HasSubstr("region yields the wrong number of values")));
  Hand none;
  none.for_loop([](ValueId, ValueId) { return std::vector<ValueId>{}; });
  EXPECT_THAT(verify_error(none.k), HasSubstr("region yields the wrong number of values"));
}

TEST(Verifier, RegionStructure) {
  {  // a region that does not end in yield
    Hand h;
    h.for_loop([](ValueId, ValueId carry) { return std::vector<ValueId>{carry}; });
    h.k.body.body.back().regions[0].body.pop_back();
    EXPECT_THAT(verify_error(h.k), HasSubstr("region does not end in yield"));
  }
  {  // a yield in the middle of a region
    Hand h;
    h.for_loop([](ValueId, ValueId carry) { return std::vector<ValueId>{carry}; });
    Region& r = h.k.body.body.back().regions[0];
    r.body.insert(r.body.begin(), Hand::yield({r.args[1]}));
    EXPECT_THAT(verify_error(h.k), HasSubstr("yield before the end of a region"));
  }
  {  // a yield at the top level
    Hand h;
    ValueId a = h.value({f32, {}});
    h.k.body.body = {Hand::constant(a), Hand::yield({a})};
    EXPECT_THAT(verify_error(h.k), HasSubstr("yield at the top level"));
  }
  {  // a for whose region takes the wrong number of arguments
    Hand h;
    h.for_loop([](ValueId, ValueId carry) { return std::vector<ValueId>{carry}; });
    h.k.body.body.back().regions[0].args.pop_back();
    EXPECT_THAT(verify_error(h.k), HasSubstr("for region args"));
  }
  {  // a while with one region, an add with a region
    Hand h;
    ValueId a = h.value({i32, {}}), r = h.value({i32, {}});
    Region cond;
    cond.body.push_back(Hand::yield({}));
    h.k.body.body = {Hand::constant(a), Inst{.op = Op::While, .results = {r}, .operands = {a}, .regions = {cond}}};
    EXPECT_THAT(verify_error(h.k), HasSubstr("while shape"));
    h.k.body.body[1] = Inst{.op = Op::Add, .results = {r}, .operands = {a, a}, .regions = {cond}};
    EXPECT_THAT(verify_error(h.k), HasSubstr("add has regions"));
  }
}

TEST(Verifier, ValueDefinedTwice) {
  Hand h;
  ValueId a = h.value({f32, {4}});
  h.k.body.body = {Hand::constant(a), Hand::constant(a)};
  EXPECT_THAT(verify_error(h.k), HasSubstr("value %0 defined twice"));
}

TEST(Verifier, OperandTypesOfBinaryOps) {
  Hand h;
  ValueId a = h.value({f32, {4}}), b = h.value({f32, {8}}), c = h.value({f32, {4}});
  h.k.body.body = {Hand::constant(a), Hand::constant(b), Hand::binary(Op::Mul, c, a, b)};
  EXPECT_THAT(verify_error(h.k), HasSubstr("mul operand types differ"));
  ValueId d = h.value({i32, {4}}), e = h.value({bool_, {4}});
  h.k.body.body = {Hand::constant(a), Hand::constant(d), Hand::binary(Op::Lt, e, a, d)};
  EXPECT_THAT(verify_error(h.k), HasSubstr("lt operand types differ"));
}

TEST(Verifier, RefsAndMemoryOps) {
  Hand h;
  ValueId o0 = h.value({i32, {}}), start = h.value({i32, {}}), v = h.value({f32, {4}});
  h.k.refs.push_back(RefParam{.name = "x0", .dtype = f32, .array_shape = {8}, .block_shape = {4}, .squeezed = {false},
                              .ref_shape = {4}, .origin = {o0}});
  h.k.num_inputs = 1;
  Inst load{.op = Op::Load, .results = {v}, .operands = {start}, .i0 = 0, .index = {IndexEntry{false, 4, 1}}};
  h.k.body.body = {Hand::constant(o0), Hand::constant(start), load};
  EXPECT_EQ(verify_error(h.k), "<no InternalError thrown>");
  h.k.body.body[2].index.push_back(IndexEntry{true, 1, 1});
  EXPECT_THAT(verify_error(h.k), HasSubstr("memory op index rank"));
  h.k.body.body[2] = load;
  h.k.refs[0].origin = {h.value({i32, {}})};  // never defined
  EXPECT_THAT(verify_error(h.k), HasSubstr("origin of ref x0 is not defined"));
  h.k.refs[0].origin = {o0};
  h.k.refs[0].squeezed = {false, true};
  EXPECT_THAT(verify_error(h.k), HasSubstr("ref x0 block rank"));
  h.k.refs[0].squeezed = {false};
  h.k.body.body.push_back(Inst{.op = Op::Store, .operands = {start, v}, .i0 = 0, .index = {IndexEntry{false, 4, 1}}});
  EXPECT_THAT(verify_error(h.k), HasSubstr("store writes input ref x0"));
}

// The verifier's own report must not fail on the broken IR it reports.
// Regression: a kernel too broken to print still produces the verifier's InternalError.
TEST(Verifier, ReportsOutOfRangeIdsAsInternalErrors) {
  {
    Hand h;
    ValueId a = h.value({f32, {4}});
    h.k.body.body = {Hand::constant(a), Hand::constant(a + 5)};
    EXPECT_THAT(verify_error(h.k), HasSubstr("result id out of range"));
  }
  {
    Hand h;
    ValueId s = h.value({i32, {}}), v = h.value({f32, {4}});
    h.k.body.body = {Hand::constant(s), Inst{.op = Op::Load, .results = {v}, .operands = {s}, .i0 = 3, .index = {IndexEntry{}}}};
    EXPECT_THAT(verify_error(h.k), HasSubstr("memory op ref index"));
  }
}

// A value defined inside a region is not visible after the region ends (as the tracer's
// check_visible enforces); IR from a pass that breaks this must not verify.
// Regression: a value defined inside a region is not visible after it.
TEST(Verifier, RegionScoping) {
  Hand h;
  ValueId inside = -1;
  ValueId r = h.for_loop([](ValueId, ValueId carry) { return std::vector<ValueId>{carry}; }, &inside);
  ValueId after = h.value({f32, {4}});
  h.k.body.body.push_back(Hand::binary(Op::Add, after, r, inside));
  EXPECT_THAT(verify_error(h.k), HasSubstr("add uses %" + std::to_string(inside)));
}

}  // namespace
}  // namespace palladium::ir
