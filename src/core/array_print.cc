// Array::str() and Array::repr(): NumPy's array printing (numpy/_core/arrayprint.py with the default
// options: precision 8, floatmode "maxprec", threshold 1000, edgeitems 3, linewidth 75) and JAX's
// Array repr around it. Element formatting follows NumPy's formatter classes (IntegerFormat,
// FloatingFormat, BoolFormat); bfloat16, which NumPy does not know, prints as ml_dtypes does ("%g").
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "palladium/array.h"
#include "palladium/device.h"

namespace palladium {

namespace {

constexpr int kPrecision = 8;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int kLineWidth = 75;

// A finite value as decimal digits: sign, d1.d2d3... x 10^exp10, no leading or trailing zeros
// ("0" for zero).
struct Decimal {
  bool negative = false;
  std::string digits = "0";
  int exp10 = 0;
};

// Reads the output of to_chars (fixed or scientific) into a Decimal.
Decimal parse_decimal(const char* begin, const char* end) {
  Decimal d;
  const char* p = begin;
  if (p < end && *p == '-') {
    d.negative = true;
    ++p;
  }
  std::string digits;
  int point = -1;  // number of digits before the decimal point
  for (; p < end && *p != 'e'; ++p) {
    if (*p == '.') point = static_cast<int>(digits.size());
    else digits += *p;
  }
  if (point < 0) point = static_cast<int>(digits.size());
  int exponent = 0;
  if (p < end && *p == 'e') std::from_chars(p + (p[1] == '+' ? 2 : 1), end, exponent);
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return d;  // zero keeps its sign
  const size_t last = digits.find_last_not_of('0');
  d.digits = digits.substr(first, last - first + 1);
  d.exp10 = exponent + point - 1 - static_cast<int>(first);
  return d;
}

template <class T, class... Format> Decimal to_decimal(T value, Format... format) {
  char buf[400];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value, format...);
  PL_ASSERT(result.ec == std::errc(), "to_chars failed");
  return parse_decimal(buf, result.ptr);
}

// The shortest digits that round back to the same float16: for increasing p, the nearest decimal
// with p significant digits or one of its neighbours (every candidate is exact or correctly rounded
// in double, far finer than float16's rounding boundaries).
Decimal shortest_half(double v) {
  const double magnitude = std::fabs(v);
  for (int p = 1; p <= 17; ++p) {
    const Decimal nearest = to_decimal(magnitude, std::chars_format::scientific, p - 1);
    const int scale = nearest.exp10 - p + 1;  // candidates are n * 10^scale
    int64_t n = 0;
    for (int i = 0; i < p; ++i) {
      const size_t k = static_cast<size_t>(i);
      n = n * 10 + (k < nearest.digits.size() ? nearest.digits[k] - '0' : 0);
    }
    double power = 1.0;  // 10^|scale|, exact for the few digits halves need
    for (int i = 0; i < std::abs(scale); ++i) power *= 10.0;
    // The nearest comes first and wins ties: to_chars rounds exact ties to the even digit, as
    // Dragon4 does. Real distance differences are far above the 1e-9 relative slack.
    int64_t best = 0;
    double best_distance = 0;
    for (int64_t candidate : {n, n - 1, n + 1}) {
      if (candidate <= 0) continue;
      const double c = scale >= 0 ? static_cast<double>(candidate) * power
                                  : static_cast<double>(candidate) / power;
      if (round_to(DType::float16, c) != magnitude) continue;
      const double distance = std::fabs(c - magnitude);
      if (best == 0 || distance < best_distance - 1e-9 * magnitude) {
        best = candidate;
        best_distance = distance;
      }
    }
    if (best != 0) {
      const std::string text = std::to_string(best);
      Decimal d = parse_decimal(text.data(), text.data() + text.size());
      d.exp10 += scale;
      d.negative = std::signbit(v);
      return d;
    }
  }
  return to_decimal(v, std::chars_format::scientific);
}

// The shortest digits that identify v among the values of its type (NumPy's "unique" Dragon4).
Decimal shortest_decimal(double v, DType t) {
  if (v == 0) {
    Decimal d;
    d.negative = std::signbit(v);
    return d;
  }
  if (t == DType::float16) return shortest_half(v);
  if (t == DType::float32) return to_decimal(static_cast<float>(v), std::chars_format::scientific);
  return to_decimal(v, std::chars_format::scientific);
}

int fraction_digits(const Decimal& d) { return std::max(0, static_cast<int>(d.digits.size()) - 1 - d.exp10); }

// Unique digits, but at most `precision` digits after the point (rounded half to even, exactly).
Decimal positional_digits(double v, DType t, int precision) {
  Decimal d = shortest_decimal(v, t);
  if (precision >= 0 && fraction_digits(d) > precision) {
    const bool negative = std::signbit(v);
    d = to_decimal(v, std::chars_format::fixed, precision);
    d.negative = negative;
  }
  return d;
}

// Unique digits, but at most `precision` digits after the first significant one.
Decimal scientific_digits(double v, DType t, int precision) {
  Decimal d = shortest_decimal(v, t);
  if (precision >= 0 && static_cast<int>(d.digits.size()) - 1 > precision)
    d = to_decimal(v, std::chars_format::scientific, precision);
  return d;
}

struct Parts {
  std::string int_part, frac_part, exponent;  // exponent: digits only, sign kept in exp_negative
  bool exp_negative = false;
};

Parts positional_parts(const Decimal& d) {
  Parts p;
  const int n = static_cast<int>(d.digits.size());
  if (d.digits == "0") {
    p.int_part.assign(1, '0');
  } else if (d.exp10 < 0) {
    p.int_part.assign(1, '0');
    p.frac_part = std::string(static_cast<size_t>(-d.exp10 - 1), '0') + d.digits;
  } else {
    p.int_part = d.digits.substr(0, static_cast<size_t>(std::min(n, d.exp10 + 1)));
    if (n < d.exp10 + 1) p.int_part += std::string(static_cast<size_t>(d.exp10 + 1 - n), '0');
    if (n > d.exp10 + 1) p.frac_part = d.digits.substr(static_cast<size_t>(d.exp10 + 1));
  }
  if (d.negative) p.int_part.insert(p.int_part.begin(), '-');
  return p;
}

Parts scientific_parts(const Decimal& d) {
  Parts p;
  p.int_part = d.negative ? std::string("-") : std::string();
  p.int_part += d.digits[0];
  p.frac_part = d.digits.substr(1);
  p.exp_negative = d.exp10 < 0;
  p.exponent = std::to_string(std::abs(d.exp10));
  if (p.exponent.size() < 2) p.exponent.insert(p.exponent.begin(), '0');
  return p;
}

std::string pad_with(const std::string& s, size_t width, char fill, bool on_left) {
  if (s.size() >= width) return s;
  const std::string padding(width - s.size(), fill);
  return on_left ? padding + s : s + padding;
}
std::string pad_left(const std::string& s, size_t width) { return pad_with(s, width, ' ', true); }
std::string pad_right(const std::string& s, size_t width) { return pad_with(s, width, ' ', false); }

std::string non_finite_str(double v) { return std::isnan(v) ? "nan" : (v < 0 ? "-inf" : "inf"); }

// NumPy's FloatingFormat for floatmode "maxprec": one layout (positional or scientific, paddings)
// chosen from all printed values, then applied to each.
class FloatFormat {
 public:
  FloatFormat(const std::vector<double>& values, DType t) : dtype_(t) {
    std::vector<double> finite;
    bool neg_inf = false;
    for (double v : values) {
      if (std::isfinite(v)) finite.push_back(v);
      else if (std::isinf(v) && v < 0) neg_inf = true;
    }
    double max_abs = 0, min_abs = 0;
    bool any_nonzero = false;
    for (double v : finite) {
      if (v == 0) continue;
      const double a = std::fabs(v);
      max_abs = any_nonzero ? std::max(max_abs, a) : a;
      min_abs = any_nonzero ? std::min(min_abs, a) : a;
      any_nonzero = true;
    }
    // NumPy switches to scientific above 10^min(8, decimal precision of the type); the ratio is
    // computed in the array's own type (it can round or overflow there).
    const double max_positional = t == DType::float16 ? 1e3 : t == DType::float32 ? 1e6 : 1e8;
    scientific_ = any_nonzero &&
                  (max_abs >= max_positional || min_abs < 1e-4 || round_to(t, max_abs / min_abs) > 1000.0);
    if (finite.empty()) {
      pad_left_ = pad_right_ = 0;
    } else if (scientific_) {
      size_t exp_size = 0;
      for (double v : finite) {
        const Parts p = scientific_parts(scientific_digits(v, t, kPrecision));
        precision_ = std::max(precision_, static_cast<int>(p.frac_part.size()));
        pad_left_ = std::max(pad_left_, p.int_part.size());
        exp_size = std::max(exp_size, p.exponent.size());
      }
      exp_size_ = exp_size;
      pad_right_ = exp_size_ + 2 + static_cast<size_t>(precision_);
    } else {
      for (double v : finite) {
        const Parts p = positional_parts(positional_digits(v, t, kPrecision));
        pad_left_ = std::max(pad_left_, p.int_part.size());
        pad_right_ = std::max(pad_right_, p.frac_part.size());
      }
    }
    if (finite.size() != values.size()) {
      // Room for "nan", "inf" and "-inf" in the same width as the numbers.
      const size_t offset = pad_right_ + 1;
      const size_t inf_width = 3 + (neg_inf ? 1 : 0);
      if (3 > offset) pad_left_ = std::max(pad_left_, 3 - offset);
      if (inf_width > offset) pad_left_ = std::max(pad_left_, inf_width - offset);
    }
  }

  std::string operator()(double v) const {
    if (!std::isfinite(v)) return pad_left(non_finite_str(v), pad_left_ + pad_right_ + 1);
    if (scientific_) {
      // Every value shows precision_ digits; past its unique ones they are the exact value's digits
      // (NumPy's min_digits), not zeros.
      Decimal d = scientific_digits(v, dtype_, precision_);
      if (static_cast<int>(d.digits.size()) - 1 < precision_) d = to_decimal(v, std::chars_format::scientific, precision_);
      const Parts p = scientific_parts(d);
      const std::string frac = pad_with(p.frac_part, static_cast<size_t>(precision_), '0', false);
      const std::string exponent = pad_with(p.exponent, exp_size_, '0', true);
      return pad_left(p.int_part, pad_left_) + "." + frac + "e" + (p.exp_negative ? "-" : "+") + exponent;
    }
    const Parts p = positional_parts(positional_digits(v, dtype_, kPrecision));
    return pad_left(p.int_part, pad_left_) + "." + pad_right(p.frac_part, pad_right_);
  }

 private:
  DType dtype_;
  bool scientific_ = false;
  int precision_ = 0;  // digits after the point in scientific mode
  size_t pad_left_ = 0, pad_right_ = 0, exp_size_ = 0;
};

std::string bfloat16_str(double v) {
  if (std::isnan(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);  // ml_dtypes prints through a default ostream
  return buf;
}

// NumPy's str() of a scalar: unique digits, positional in a middle range, else scientific.
std::string scalar_str(const Array& a) {
  const DType t = a.dtype();
  if (t == DType::bool_) return a.get_int(0) ? "True" : "False";
  if (is_integer(t)) return std::to_string(a.get_int(0));
  const double v = a.get(0);
  if (t == DType::bfloat16) return bfloat16_str(v);
  if (!std::isfinite(v)) return non_finite_str(v);
  const double max_positional = t == DType::float16 ? 1e3 : t == DType::float32 ? 1e6 : 1e16;
  const double magnitude = std::fabs(v);
  if (magnitude == 0 || (magnitude < max_positional && magnitude >= 1e-4)) {
    const Parts p = positional_parts(shortest_decimal(v, t));
    return p.int_part + "." + (p.frac_part.empty() ? "0" : p.frac_part);
  }
  const Parts p = scientific_parts(shortest_decimal(v, t));
  std::string out = p.int_part;
  if (!p.frac_part.empty()) (out += ".") += p.frac_part;
  return out + "e" + (p.exp_negative ? "-" : "+") + p.exponent;
}

// Flat indices of the elements that are printed: all of them, or with summarisation only the first
// and last kEdgeItems along each long axis.
void collect_shown(const Shape& shape, const std::vector<int64_t>& strides, bool summarize, size_t axis,
                   int64_t base, std::vector<int64_t>& out) {
  if (axis == shape.size()) {
    out.push_back(base);
    return;
  }
  const int64_t n = shape[axis];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    collect_shown(shape, strides, summarize, axis + 1, base + i * strides[axis], out);
  }
}

std::string rstrip(const std::string& s) {
  const size_t end = s.find_last_not_of(' ');
  return end == std::string::npos ? "" : s.substr(0, end + 1);
}

// NumPy's _formatArray: nested brackets, rows wrapped at the line width, "..." when summarising.
class Layout {
 public:
  Layout(const Array& a, std::function<std::string(int64_t)> format, int line_width, std::string separator,
         bool summarize)
      : shape_(a.shape()), strides_(row_major_strides(a.shape())), format_(std::move(format)),
        line_width_(line_width), separator_(std::move(separator)), summarize_(summarize) {}

  std::string render(const std::string& hanging_indent) { return recurse(0, 0, hanging_indent, line_width_); }

 private:
  // NumPy's _extendLine: start a new line when the word would not fit (unless that cannot help).
  void extend_line(std::string& s, std::string& line, const std::string& word, int width,
                   const std::string& next_line_prefix) const {
    const bool needs_wrap = static_cast<int>(line.size() + word.size()) > width && line.size() > next_line_prefix.size();
    if (needs_wrap) {
      s += rstrip(line) + "\n";
      line = next_line_prefix;
    }
    line += word;
  }

  std::string recurse(size_t axis, int64_t base, const std::string& hanging_indent, int width) {
    if (axis == shape_.size()) return format_(base);
    const std::string next_indent = hanging_indent + " ";
    const int next_width = width - 1;  // room for the closing bracket
    const int64_t n = shape_[axis];
    const bool show_summary = summarize_ && 2 * kEdgeItems < n;
    const int64_t leading = show_summary ? kEdgeItems : 0;
    const int64_t trailing = show_summary ? kEdgeItems : n;
    const size_t axes_left = shape_.size() - axis;
    auto child = [&](int64_t i) { return recurse(axis + 1, base + i * strides_[axis], next_indent, next_width); };
    std::string s;
    if (axes_left == 1) {
      const int elem_width = width - static_cast<int>(std::max<size_t>(rstrip(separator_).size(), 1));
      std::string line = hanging_indent;
      for (int64_t i = 0; i < leading; ++i) {
        extend_line(s, line, child(i), elem_width, hanging_indent);
        line += separator_;
      }
      if (show_summary) {
        extend_line(s, line, "...", elem_width, hanging_indent);
        line += separator_;
      }
      for (int64_t i = trailing; i > 1; --i) {
        extend_line(s, line, child(n - i), elem_width, hanging_indent);
        line += separator_;
      }
      extend_line(s, line, child(n - 1), elem_width, hanging_indent);
      s += line;
    } else {
      const std::string line_sep = rstrip(separator_) + std::string(axes_left - 1, '\n');
      for (int64_t i = 0; i < leading; ++i) s += hanging_indent + child(i) + line_sep;
      if (show_summary) s += hanging_indent + "..." + line_sep;
      for (int64_t i = trailing; i > 1; --i) s += hanging_indent + child(n - i) + line_sep;
      s += hanging_indent + child(n - 1);
    }
    std::string bracketed = "[";
    bracketed.append(s, hanging_indent.size());
    return bracketed + "]";
  }

  Shape shape_;
  std::vector<int64_t> strides_;
  std::function<std::string(int64_t)> format_;
  int line_width_;
  std::string separator_;
  bool summarize_;
};

// NumPy's array2string for a non-empty array.
std::string array2string(const Array& a, const std::string& separator, const std::string& prefix,
                         const std::string& suffix) {
  const bool summarize = a.size() > kThreshold;
  std::vector<int64_t> shown;
  collect_shown(a.shape(), row_major_strides(a.shape()), summarize, 0, 0, shown);
  const DType t = a.dtype();
  std::function<std::string(int64_t)> format;
  if (t == DType::bool_) {
    const std::string true_str = a.ndim() == 0 ? "True" : " True";
    format = [&a, true_str](int64_t i) { return a.get_int(i) ? true_str : std::string("False"); };
  } else if (is_integer(t)) {
    size_t width = 0;
    for (int64_t i : shown) width = std::max(width, std::to_string(a.get_int(i)).size());
    format = [&a, width](int64_t i) { return pad_left(std::to_string(a.get_int(i)), width); };
  } else if (t == DType::bfloat16) {
    format = [&a](int64_t i) { return bfloat16_str(a.get(i)); };
  } else {
    std::vector<double> values;
    values.reserve(shown.size());
    for (int64_t i : shown) values.push_back(a.get(i));
    FloatFormat float_format(values, t);
    format = [&a, float_format](int64_t i) { return float_format(a.get(i)); };
  }
  const int line_width = kLineWidth - static_cast<int>(suffix.size());
  Layout layout(a, std::move(format), line_width, separator, summarize);
  return layout.render(std::string(prefix.size() + 1, ' '));
}

void check_printable(const Array& a) {
  PL_CHECK(a.device().kind == Device::cpu, "Array::str: the array is on ", a.device().str(),
           "; copy it to the host to print it");
}

}  // namespace

std::string Array::str() const {
  if (!defined()) return "None";
  if (is_sharded()) return to_host(*this).str();
  check_printable(*this);
  if (ndim() == 0) return scalar_str(*this);
  if (size() == 0) return "[]";
  return array2string(*this, " ", "", "");
}

std::string Array::repr() const {
  if (!defined()) return "None";
  if (is_sharded()) return to_host(*this).repr();
  check_printable(*this);
  // JAX's Array.__repr__: the body through array2string, then the dtype on the same line if it fits.
  const std::string prefix = "Array(";
  const std::string dtype_str = std::string("dtype=") + dtype_name(dtype_) + ")";
  const std::string body =
      size() == 0 ? std::string("[], shape=") + shape_str(shape_) : array2string(*this, ", ", prefix, ",");
  const size_t newline = body.rfind('\n');
  const size_t last_line_len = newline == std::string::npos ? body.size() + 2 : body.size() - newline + 1;
  const std::string sep = last_line_len + dtype_str.size() + 1 > static_cast<size_t>(kLineWidth)
                              ? std::string(prefix.size(), ' ')
                              : std::string(" ");
  return prefix + body + "," + sep + dtype_str;
}

}  // namespace palladium
