// The Pallas quickstart, in C++: every example, printing its result and checking it.
#include <cstdio>
#include <iostream>

#include <palladium/palladium.h>

namespace pl = palladium;
namespace jnp = palladium::jnp;

// Hello world: add two vectors.
void add_vectors_kernel(pl::Ref x_ref, pl::Ref y_ref, pl::Ref o_ref) {
  pl::Value x = x_ref[pl::all], y = y_ref[pl::all];
  o_ref[pl::all] = x + y;
}

pl::Array add_vectors(const pl::Array& x, const pl::Array& y) {
  return pl::pallas_call(add_vectors_kernel, pl::ShapeDtype(x.shape(), x.dtype()))(x, y);
}

// A grid: each program writes its own id.
void iota_kernel(pl::Ref o_ref) {
  pl::Value i = pl::program_id(0);
  o_ref[i] = i;
}

pl::Array iota(int64_t size) {
  return pl::pallas_call(iota_kernel, pl::ShapeDtype({size}, pl::i32), {.grid = {size}})();
}

// Block specs: a 2x2 grid of (512, 1024) x (1024, 512) products, with an activation passed in.
template <class Activation>
pl::Callable<pl::Array> matmul_call(const pl::Shape& xs, const pl::Shape& ys, pl::DType dtype, Activation activation) {
  auto kernel = [activation](pl::Ref x_ref, pl::Ref y_ref, pl::Ref z_ref) {
    z_ref[pl::all] = activation(pl::dot(x_ref[pl::all], y_ref[pl::all]));
  };
  return pl::pallas_call(
      kernel, pl::ShapeDtype({xs[0], ys[1]}, dtype),
      {.grid = {2, 2},
       .in_specs = {pl::BlockSpec({xs[0] / 2, xs[1]}, [](pl::Index i, pl::Index) { return pl::idx(i, 0); }),
                    pl::BlockSpec({ys[0], ys[1] / 2}, [](pl::Index, pl::Index j) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({xs[0] / 2, ys[1] / 2}, [](pl::Index i, pl::Index j) { return pl::idx(i, j); })}});
}

auto identity = [](const pl::Value& v) { return v; };
auto relu = [](const pl::Value& v) { return pl::nn::relu(v); };

int main() {
  bool ok = true;
  auto check = [&](const char* what, double err, double tol) {
    std::printf("  %s: rel err %.2e %s\n", what, err, err <= tol ? "ok" : "MISMATCH");
    ok = ok && err <= tol;
  };

  std::cout << "backend: " << pl::default_backend() << "\n\n";
  std::cout << "add_vectors(arange(8), arange(8))\n" << add_vectors(pl::arange(8), pl::arange(8)).repr() << "\n";
  ok = ok && pl::array_equal(add_vectors(pl::arange(8), pl::arange(8)), pl::arange(0, 16, 2));

  std::cout << "\niota(8)\n" << iota(8).repr() << "\n";
  ok = ok && pl::array_equal(iota(8), pl::arange(8));

  auto keys = pl::random::split(pl::random::key(0));
  pl::Array x = pl::random::normal(keys[0], {1024, 1024});
  pl::Array y = pl::random::normal(keys[1], {1024, 1024});
  pl::Array ref = pl::matmul(x, y);

  std::cout << "\nmatmul(x, y) on a 2x2 grid, x, y: (1024, 1024) float32\n";
  pl::Array z = matmul_call(x.shape(), y.shape(), pl::f32, identity)(x, y);
  std::cout << z << "\n";
  check("matmul vs float64 x @ y", pl::rel_error(z, ref), 1e-5);

  std::cout << "\nmatmul(x, y, activation=relu)\n";
  pl::Array zr = matmul_call(x.shape(), y.shape(), pl::f32, relu)(x, y);
  std::cout << zr << "\n";
  check("relu(matmul) vs relu(x @ y)", pl::rel_error(zr, pl::relu(ref)), 1e-5);

  std::cout << "\nvmap(matmul with relu) over a batch of 4, x, y: (4, 1024, 1024)\n";
  auto bkeys = pl::random::split(pl::random::key(1));
  pl::Array bx = pl::random::normal(bkeys[0], {4, 1024, 1024});
  pl::Array by = pl::random::normal(bkeys[1], {4, 1024, 1024});
  auto batched = pl::vmap(matmul_call({1024, 1024}, {1024, 1024}, pl::f32, relu));
  pl::Array bz = batched(bx, by);
  std::cout << "shape " << pl::shape_str(bz.shape()) << "\n";
  check("vmap(relu(matmul)) vs relu(batched x @ y)", pl::rel_error(bz, pl::relu(pl::matmul(bx, by))), 1e-5);

  std::cout << (ok ? "\nall quickstart examples match\n" : "\nMISMATCH\n");
  return ok ? 0 : 1;
}
