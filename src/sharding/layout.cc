// Shardings and sharded Arrays: which piece each device holds, cutting a host array into pieces
// and assembling them again, device_put and the layout printout.
#include <cstring>
#include <sstream>

#include "palladium/device.h"
#include "sharding/distributed.h"
#include "sharding/sharding.h"

namespace palladium::sharding {

namespace {

// Copies the block of `big` at `offsets` with the shape of `small` into `small` (to_small), or back.
void copy_block(const Array& big, Array& small_arr, const std::vector<int64_t>& offsets, bool to_small, Array* big_out) {
  const Shape& bs = big.shape();
  const Shape& ss = small_arr.shape();
  const size_t rank = bs.size();
  const size_t item = itemsize(big.dtype());
  if (numel(ss) == 0) return;
  if (rank == 0) {
    if (to_small) std::memcpy(small_arr.data(), big.data(), item);
    else std::memcpy(big_out->data(), small_arr.data(), item);
    return;
  }
  std::vector<int64_t> big_strides(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) big_strides[d] = big_strides[d + 1] * bs[d + 1];
  const int64_t run = ss[rank - 1];
  const int64_t rows = numel(ss) / run;
  std::vector<int64_t> idx(rank, 0);
  const char* src_big = to_small ? static_cast<const char*>(big.data()) : nullptr;
  char* dst_big = to_small ? nullptr : static_cast<char*>(big_out->data());
  char* small_p = static_cast<char*>(small_arr.data());
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = offsets[rank - 1];
    for (size_t d = 0; d + 1 < rank; ++d) off += (offsets[d] + idx[d]) * big_strides[d];
    char* sp = small_p + static_cast<size_t>(r * run) * item;
    if (to_small) std::memcpy(sp, src_big + static_cast<size_t>(off) * item, static_cast<size_t>(run) * item);
    else std::memcpy(dst_big + static_cast<size_t>(off) * item, sp, static_cast<size_t>(run) * item);
    for (size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < ss[d]) break;
      idx[d] = 0;
    }
  }
}

std::vector<int64_t> offsets_of(const Shape& global, const Sharding& s, int64_t position) {
  const Shape local = s.local_shape(global);
  std::vector<int64_t> off(global.size());
  for (size_t d = 0; d < global.size(); ++d) off[d] = s.piece_index(d, position) * local[d];
  return off;
}

}  // namespace

Sharding Sharding::replicated(std::shared_ptr<const Mesh> mesh, size_t rank) {
  return Sharding{std::move(mesh), std::vector<std::vector<int>>(rank)};
}

int64_t Sharding::pieces(size_t d) const {
  int64_t n = 1;
  for (int a : dims.at(d)) n *= mesh->shape().at(static_cast<size_t>(a));
  return n;
}

Shape Sharding::local_shape(const Shape& global) const {
  PL_ASSERT(global.size() == dims.size(), "sharding ", str(), " for shape ", shape_str(global));
  Shape s = global;
  for (size_t d = 0; d < s.size(); ++d) s[d] /= pieces(d);
  return s;
}

int64_t Sharding::piece_index(size_t d, int64_t position) const {
  const std::vector<int64_t> c = mesh->coords(position);
  int64_t idx = 0;
  for (int a : dims.at(d)) idx = idx * mesh->shape()[static_cast<size_t>(a)] + c[static_cast<size_t>(a)];
  return idx;
}

std::string Sharding::str() const {
  std::string s = "(";
  for (size_t d = 0; d < dims.size(); ++d) {
    s += d ? ", " : "";
    if (dims[d].empty()) s += "None";
    for (size_t i = 0; i < dims[d].size(); ++i)
      s += (i ? "*" : "") + mesh->axis_names()[static_cast<size_t>(dims[d][i])];
  }
  return s + ")";
}

Sharding from_named(const NamedSharding& n, size_t rank, const std::string& what) {
  PL_CHECK(n.spec.dims().size() <= rank, what, ": ", n.spec.str(), " has ", n.spec.dims().size(),
           " entries for an array of rank ", rank);
  Sharding s = Sharding::replicated(std::make_shared<const Mesh>(n.mesh), rank);
  for (size_t d = 0; d < n.spec.dims().size(); ++d)
    for (const std::string& name : n.spec.dims()[d].names) s.dims[d].push_back(n.mesh.axis(name, what.c_str()));
  return s;
}

NamedSharding to_named(const Sharding& s) {
  std::vector<AxisNames> dims;
  for (const auto& d : s.dims) {
    AxisNames a(None);
    for (int i : d) a.names.push_back(s.mesh->axis_names()[static_cast<size_t>(i)]);
    dims.push_back(a);
  }
  return NamedSharding(*s.mesh, PartitionSpec::named(dims));
}

std::vector<int64_t> group_of(const Mesh& mesh, const std::vector<int>& axes, int64_t position, int64_t* index) {
  const std::vector<int64_t> mine = mesh.coords(position);
  int64_t size = 1;
  for (int a : axes) size *= mesh.shape()[static_cast<size_t>(a)];
  std::vector<int64_t> group;
  for (int64_t g = 0; g < size; ++g) {
    std::vector<int64_t> c = mine;
    int64_t rest = g;
    for (size_t i = axes.size(); i-- > 0;) {
      const int64_t n = mesh.shape()[static_cast<size_t>(axes[i])];
      c[static_cast<size_t>(axes[i])] = rest % n;
      rest /= n;
    }
    int64_t pos = 0;
    for (size_t k = 0; k < c.size(); ++k) pos = pos * mesh.shape()[k] + c[k];
    if (pos == position && index != nullptr) *index = g;
    group.push_back(pos);
  }
  return group;
}

Array piece_of(const Array& host, const Sharding& s, int64_t position) {
  Array piece(s.local_shape(host.shape()), host.dtype());
  copy_block(host, piece, offsets_of(host.shape(), s, position), true, nullptr);
  return piece;
}

Array assemble(const Shape& global, DType dtype, const Sharding& s, const std::vector<Array>& pieces) {
  Array out(global, dtype);
  // Pieces of other processes' devices travel; an array over this process's devices alone (a
  // sharded_jit result cut by local_out_parts) is assembled here without the other processes.
  bool all_here = true;
  for (const Device& d : s.mesh->devices()) all_here = all_here && is_local(d);
  for (int64_t p = 0; p < static_cast<int64_t>(pieces.size()); ++p) {
    const Array& given = pieces[static_cast<size_t>(p)];
    Array piece;
    if (multi_process() && !all_here) {
      // Pieces of other processes' devices arrive from their owners (every process takes part).
      piece = given.defined() ? to_host(given).copy() : Array(s.local_shape(global), dtype);
      broadcast_from(piece, owner_process(s.mesh->devices()[static_cast<size_t>(p)]));
    } else {
      piece = to_host(given);
    }
    copy_block(out, piece, offsets_of(global, s, p), false, &out);
  }
  return out;
}

Array take_block(const Array& x, size_t axis, int64_t index, int64_t count) {
  Shape shape = x.shape();
  shape.at(axis) /= count;
  Array out(shape, x.dtype());
  std::vector<int64_t> off(shape.size(), 0);
  off[axis] = index * shape[axis];
  copy_block(x, out, off, true, nullptr);
  return out;
}

Array join_blocks(const std::vector<Array>& parts, size_t axis) {
  Shape shape = parts.at(0).shape();
  shape.at(axis) *= static_cast<int64_t>(parts.size());
  Array out(shape, parts[0].dtype());
  std::vector<int64_t> off(shape.size(), 0);
  for (size_t i = 0; i < parts.size(); ++i) {
    Array part = to_host(parts[i]);
    off[axis] = static_cast<int64_t>(i) * part.shape()[axis];
    copy_block(out, part, off, false, &out);
  }
  return out;
}

std::vector<Array> split(const Array& x, const Sharding& s) {
  if (x.is_sharded()) {
    const Sharding have = from_named(x.sharded()->sharding, x.shape().size(), "device_put");
    if (*have.mesh == *s.mesh && have == s) return x.sharded()->pieces;
  }
  const Array host = to_host(x);
  for (size_t d = 0; d < host.shape().size(); ++d)
    PL_CHECK(host.shape()[d] % s.pieces(d) == 0, "device_put: dimension ", d, " of shape ", shape_str(host.shape()),
             " is not divisible into ", s.pieces(d), " pieces (sharding ", s.str(), ")");
  std::vector<Array> pieces;
  for (int64_t p = 0; p < s.mesh->size(); ++p) {
    const Device d = s.mesh->devices()[static_cast<size_t>(p)];
    Array piece = piece_of(host, s, p);
    pieces.push_back(d.kind == Device::cuda && is_local(d) ? to_device(piece, d) : piece);  // each on its GPU
  }
  return pieces;
}

Array make_sharded(const Shape& global, DType dtype, const Sharding& s, std::vector<Array> pieces) {
  auto v = std::make_shared<detail::ShardedValue>();
  v->sharding = to_named(s);
  v->pieces = std::move(pieces);
  return Array::from_shards(global, dtype, std::move(v));
}

}  // namespace palladium::sharding

namespace palladium {

using sharding::Sharding;

Array device_put(const Array& x, const NamedSharding& named) {
  PL_CHECK(x.defined() && !x.is_tracer(), "device_put: needs a concrete Array");
  const Sharding s = sharding::from_named(named, x.shape().size(), "device_put");
  return sharding::make_sharded(x.shape(), x.dtype(), s, sharding::split(x, s));
}

const NamedSharding& sharding_of(const Array& x) {
  PL_CHECK(x.is_sharded(), "sharding_of: the array is not sharded (it lives on ", x.defined() ? x.device().str() : "nothing",
           ")");
  return x.sharded()->sharding;
}

std::string layout_str(const Array& x) {
  const NamedSharding& n = sharding_of(x);
  const Sharding s = sharding::from_named(n, x.shape().size(), "layout_str");
  const Shape local = s.local_shape(x.shape());
  std::ostringstream os;
  os << n.spec.str() << " over " << n.mesh.str() << ", global " << dtype_short_name(x.dtype()) << shape_str(x.shape())
     << "\n";
  for (int64_t p = 0; p < n.mesh.size(); ++p) {
    os << "  " << device_name(n.mesh.devices()[static_cast<size_t>(p)]) << "  [";
    for (size_t d = 0; d < local.size(); ++d) {
      const int64_t start = s.piece_index(d, p) * local[d];
      os << (d ? ", " : "") << start << ":" << start + local[d];
    }
    os << "]\n";
  }
  return os.str();
}

namespace detail {

Device first_piece_device(const ShardedValue& v) {
  for (const Array& p : v.pieces)
    if (p.defined()) return p.device();
  return Device{};
}

void sharded_data_error(const char* what, const Array& a) {
  throw Error(std::string(what) + ": the array is sharded over " + std::to_string(a.sharded()->pieces.size()) +
              " devices (" + a.sharded()->sharding.spec.str() + "); read it through pl::to_host(x), which gathers it");
}

Array gather_pieces(const Array& a) {
  const Sharding s = sharding::from_named(a.sharded()->sharding, a.shape().size(), "to_host");
  return sharding::assemble(a.shape(), a.dtype(), s, a.sharded()->pieces);
}

}  // namespace detail

}  // namespace palladium
