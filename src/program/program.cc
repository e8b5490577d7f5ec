// Program IR: names, parameter keys, the printer and the verifier.
#include "program/program.h"

#include <cstdio>
#include <set>
#include <sstream>

#include "ops/call_cache.h"
#include "program/families.h"

namespace palladium::program {

namespace {

const char* const kNames[] = {
#define PL_PRIM(name, family, vjp, batch, shard) #name,
#include "program/prims.def"
#undef PL_PRIM
};

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

[[noreturn]] void bad(const Program& p, size_t eqn, const std::string& msg) {
  throw InternalError("program '" + p.name + "' equation " + std::to_string(eqn) + ": " + msg + "\n" + print(p));
}

}  // namespace

const char* prim_name(Prim p) { return kNames[static_cast<size_t>(p)]; }

std::string type_str(const Type& t) {
  std::string s = dtype_short_name(t.dtype);
  s += "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
  return s + "]";
}

std::string types_key(const std::vector<Array>& xs) {
  std::string key;
  for (const Array& a : xs) {
    key += '|';
    key += type_str({a.shape(), a.dtype()});
  }
  return key;
}

std::string Params::key() const {
  // Appended into one string: keys are built for every eager op and every equation CSE compares.
  std::string s;
  auto field = [&s](const char* name, const std::string& value) {
    s += ' ';
    s += name;
    s += '=';
    s += value;
  };
  if (!axes.empty()) field("axes", ints(axes));
  if (!shape.empty()) field("shape", ints(shape));
  if (!lo.empty()) {
    field("lo", ints(lo));
    field("hi", ints(hi));
    field("step", ints(step));
  }
  if (dtype != DType::float32) field("dtype", dtype_short_name(dtype));
  if (scalar != 0.0) field("value", ops::exact(scalar));
  if (axis != 0) field("axis", std::to_string(axis));
  if (count != 0) field("n", std::to_string(count));
  if (count2 != 0) field("m", std::to_string(count2));
  if (flag) s += " flag";
  if (!name.empty()) field("name", name);
  char pointer[32];
  if (callee) {
    std::snprintf(pointer, sizeof pointer, "%p", callee.get());
    field("callee", pointer);
  }
  for (const auto& r : regions) {
    std::snprintf(pointer, sizeof pointer, "%p", static_cast<const void*>(r.get()));
    field("region", pointer);
  }
  return s;
}

std::string print(const Program& p) {
  std::ostringstream s;
  auto var = [&](int v) { return "%" + std::to_string(v); };
  auto typed = [&](int v) { return var(v) + ":" + type_str(p.type(v)); };
  s << "program " << p.name << "(";
  for (size_t i = 0; i < p.inputs.size(); ++i) s << (i ? ", " : "") << typed(p.inputs[i]);
  s << ") {\n";
  for (size_t i = 0; i < p.const_vars.size(); ++i)
    s << "  " << typed(p.const_vars[i]) << " = const" << (p.consts[i].size() == 1 && !p.consts[i].is_tracer() &&
                                                          p.consts[i].device().kind == Device::cpu
                                                              ? " " + std::to_string(p.consts[i].get(0))
                                                              : "")
      << "\n";
  for (const Eqn& e : p.eqns) {
    s << "  ";
    for (size_t i = 0; i < e.outs.size(); ++i) s << (i ? ", " : "") << typed(e.outs[i]);
    s << " = " << prim_name(e.prim);
    Params shown = e.params;
    shown.callee.reset();
    shown.regions.clear();
    std::string k = shown.key();
    if (!k.empty()) s << "[" << k.substr(1) << "]";
    s << "(";
    for (size_t i = 0; i < e.ins.size(); ++i) s << (i ? ", " : "") << var(e.ins[i]);
    s << ")\n";
    for (size_t r = 0; r < e.params.regions.size(); ++r) {
      std::istringstream body(print(*e.params.regions[r]));
      for (std::string line; std::getline(body, line);) s << "    " << line << "\n";
    }
  }
  s << "  return ";
  for (size_t i = 0; i < p.outputs.size(); ++i) s << (i ? ", " : "") << var(p.outputs[i]);
  s << "\n}\n";
  return s.str();
}

Program compact(Program p) {
  std::vector<int> slot(p.types.size(), -1);
  std::vector<Type> types;
  auto assign = [&](int& v) {
    int& s = slot.at(static_cast<size_t>(v));
    if (s < 0) {
      s = static_cast<int>(types.size());
      types.push_back(p.types[static_cast<size_t>(v)]);
    }
    v = s;
  };
  auto rename = [&](int& v) {
    const int s = slot.at(static_cast<size_t>(v));
    PL_ASSERT(s >= 0, "program '", p.name, "': var %", v, " is read before it is defined");
    v = s;
  };
  for (int& v : p.inputs) assign(v);
  for (int& v : p.const_vars) assign(v);
  for (Eqn& e : p.eqns) {
    for (int& v : e.ins) rename(v);
    for (int& v : e.outs) assign(v);
  }
  for (int& v : p.outputs) rename(v);
  p.types = std::move(types);
  return p;
}

void verify(const Program& p) {
  std::set<int> defined;
  auto define = [&](int v, size_t eqn) {
    if (v < 0 || static_cast<size_t>(v) >= p.types.size()) bad(p, eqn, "var %" + std::to_string(v) + " has no type");
    if (!defined.insert(v).second) bad(p, eqn, "var %" + std::to_string(v) + " is defined twice");
  };
  for (int v : p.inputs) define(v, 0);
  if (p.const_vars.size() != p.consts.size()) bad(p, 0, "constants and their vars differ in number");
  for (size_t i = 0; i < p.const_vars.size(); ++i) {
    define(p.const_vars[i], 0);
    if (p.type(p.const_vars[i]) != Type{p.consts[i].shape(), p.consts[i].dtype()}) bad(p, 0, "constant type mismatch");
  }
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    const Eqn& e = p.eqns[i];
    std::vector<Type> in_types;
    for (int v : e.ins) {
      if (!defined.count(v)) bad(p, i, "uses %" + std::to_string(v) + " before it is defined");
      in_types.push_back(p.type(v));
    }
    std::vector<Type> expect;
    try {
      expect = infer_types(e.prim, e.params, in_types);
    } catch (const Error& err) {
      bad(p, i, std::string("fails its shape rule: ") + err.what());
    }
    if (expect.size() != e.outs.size()) bad(p, i, "has the wrong number of results");
    for (size_t o = 0; o < e.outs.size(); ++o) {
      define(e.outs[o], i);
      if (p.type(e.outs[o]) != expect[o]) bad(p, i, "result type differs from its shape rule");
    }
    for (const auto& r : e.params.regions) verify(*r);
  }
  for (int v : p.outputs)
    if (!defined.count(v)) bad(p, p.eqns.size(), "returns undefined %" + std::to_string(v));
}

}  // namespace palladium::program
