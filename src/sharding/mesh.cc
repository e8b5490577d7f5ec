// Devices, Mesh, PartitionSpec, NamedSharding and Parts: the user-facing vocabulary of sharding.
#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>

#include "palladium/device.h"
#include "palladium/sharding.h"
#include "sharding/distributed.h"

namespace palladium {

namespace {

}  // namespace

namespace sharding {
// PALLADIUM_CPU_DEVICES: the number of virtual CPU devices (read at each call, so tests can set it).
int64_t cpu_devices_from_env() {
  const char* v = std::getenv("PALLADIUM_CPU_DEVICES");
  if (v == nullptr || *v == '\0') return 1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || n < 1 || n > 4096)
    throw Error(std::string("PALLADIUM_CPU_DEVICES='") + v + "' is not a device count between 1 and 4096");
  return n;
}
// PALLADIUM_PLATFORM=cpu: virtual CPU devices even where GPUs exist (as JAX_PLATFORMS=cpu).
int sharding_gpu_count() {
  const char* v = std::getenv("PALLADIUM_PLATFORM");
  if (v != nullptr && *v != '\0') {
    const std::string p = v;
    if (p == "cpu") return 0;
    if (p != "cuda") throw Error("PALLADIUM_PLATFORM='" + p + "' is not 'cpu' or 'cuda'");
  }
  return cuda_device_count();
}
}  // namespace sharding

namespace {

std::string quoted_names(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s;
}

}  // namespace

std::vector<Device> devices() {
  std::vector<Device> out;
  const int gpus = sharding::sharding_gpu_count();
  if (gpus > 0) {
    for (int i = 0; i < gpus; ++i) out.push_back(Device{Device::cuda, i});
    return out;
  }
  const int64_t n = sharding::multi_process() ? sharding::devices_per_process() * distributed::process_count()
                                              : sharding::cpu_devices_from_env();
  for (int64_t i = 0; i < n; ++i) out.push_back(Device{Device::cpu, static_cast<int>(i)});
  return out;
}

int device_count() { return static_cast<int>(devices().size()); }

std::vector<Device> local_devices() {
  std::vector<Device> out;
  for (const Device& d : devices())
    if (sharding::is_local(d)) out.push_back(d);
  return out;
}

int local_device_count() { return static_cast<int>(local_devices().size()); }

std::string device_name(Device d) { return d.kind == Device::cpu ? "cpu:" + std::to_string(d.index) : d.str(); }

Mesh::Mesh(std::vector<Device> devices, Shape shape, std::vector<std::string> axis_names)
    : devices_(std::move(devices)), shape_(std::move(shape)), names_(std::move(axis_names)) {
  PL_CHECK(shape_.size() == names_.size(), "Mesh: ", shape_.size(), " axis sizes but ", names_.size(), " axis names (",
           quoted_names(names_), ")");
  int64_t n = 1;
  for (int64_t s : shape_) {
    PL_CHECK(s >= 1, "Mesh: axis sizes must be positive, got ", shape_str(shape_));
    n *= s;
  }
  PL_CHECK(n == static_cast<int64_t>(devices_.size()), "Mesh: shape ", shape_str(shape_), " holds ", n,
           " devices but ", devices_.size(), " were given");
  std::set<std::string> seen;
  for (const std::string& name : names_) {
    PL_CHECK(!name.empty(), "Mesh: an axis name is empty");
    PL_CHECK(seen.insert(name).second, "Mesh: axis name '", name, "' is repeated");
  }
}

int Mesh::axis(const std::string& name, const char* what) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  throw Error(std::string(what) + ": no mesh axis named '" + name + "'; the mesh has axes (" + quoted_names(names_) + ")");
}

std::vector<int64_t> Mesh::coords(int64_t position) const {
  std::vector<int64_t> c(shape_.size());
  for (size_t i = shape_.size(); i-- > 0;) {
    c[i] = position % shape_[i];
    position /= shape_[i];
  }
  return c;
}

std::string Mesh::str() const {
  std::string s = "Mesh(";
  for (size_t i = 0; i < names_.size(); ++i) s += (i ? ", '" : "'") + names_[i] + "'=" + std::to_string(shape_[i]);
  s += ") over ";
  if (devices_.empty()) return s + "no devices";
  return s + device_name(devices_.front()) + (devices_.size() > 1 ? ".." + device_name(devices_.back()) : "");
}

Mesh make_mesh(Shape shape, std::vector<std::string> axis_names) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<Device> all = devices();
  PL_CHECK(n <= static_cast<int64_t>(all.size()), "make_mesh: a mesh of shape ", shape_str(shape), " needs ", n,
           " devices, but only ", all.size(), " are available (set PALLADIUM_CPU_DEVICES for virtual CPU devices)");
  all.resize(static_cast<size_t>(n));
  return Mesh(std::move(all), std::move(shape), std::move(axis_names));
}

PartitionSpec PartitionSpec::named(std::vector<AxisNames> dims) {
  PartitionSpec p;
  p.names_ = std::move(dims);
  p.form_ = Form::named;
  return p;
}

bool PartitionSpec::replicated() const {
  for (int64_t c : counts_)
    if (c != 1) return false;
  for (const AxisNames& d : names_)
    if (!d.names.empty()) return false;
  return true;
}

int64_t PartitionSpec::num_partitions() const {
  int64_t n = 1;
  for (int64_t c : counts_) n *= c;
  return n;
}

std::string PartitionSpec::str() const {
  std::ostringstream s;
  switch (form_) {
    case Form::none:
      return "None";
    case Form::counts:
      s << "PartitionSpec(";
      for (size_t i = 0; i < counts_.size(); ++i) s << (i ? ", " : "") << counts_[i];
      s << ")";
      return s.str();
    case Form::named:
      s << "P(";
      for (size_t i = 0; i < names_.size(); ++i) {
        s << (i ? ", " : "");
        const auto& n = names_[i].names;
        if (n.empty()) s << "None";
        else if (n.size() == 1) s << "'" << n[0] << "'";
        else s << "(" << quoted_names(n) << ")";
      }
      s << ")";
      return s.str();
  }
  return "?";
}

NamedSharding::NamedSharding(Mesh m, PartitionSpec s) : mesh(std::move(m)), spec(std::move(s)) {
  PL_CHECK(!spec.is_counts(), "NamedSharding: ", spec.str(),
           " gives partition counts (the sharded_jit form); a NamedSharding takes axis names, P(\"x\", None)");
  std::set<std::string> used;
  for (const AxisNames& d : spec.dims())
    for (const std::string& n : d.names) {
      (void)mesh.axis(n, "NamedSharding");
      PL_CHECK(used.insert(n).second, "NamedSharding: mesh axis '", n, "' splits two dimensions in ", spec.str());
    }
}

std::string NamedSharding::str() const { return "NamedSharding(" + mesh.str() + ", " + spec.str() + ")"; }

std::string Parts::str() const {
  if (!is_list) return named ? named->str() : spec ? spec->str() : "None";
  std::string s = "(";
  for (size_t i = 0; i < children.size(); ++i) s += (i ? ", " : "") + children[i].str();
  return s + ")";
}

}  // namespace palladium
