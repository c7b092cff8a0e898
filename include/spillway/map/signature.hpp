// spillway/map/signature.hpp — generalized-ufunc signatures: parsing "(m,n),(n,p)->(m,p)" and
// binding core dimensions to argument shapes (pure host logic).
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/map/config.hpp>
#include <spillway/map/ndview.hpp>
#include <spillway/map/shape.hpp>

#include <cctype>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace spillway {

/// One core dimension: a name bound by the arguments, or a fixed size (e.g. "(3)").
struct core_dim {
  std::string name;   ///< empty for a fixed size
  index_t fixed = -1;  ///< >= 0 for a fixed size
  friend bool operator==(const core_dim& a, const core_dim& b) { return a.name == b.name && a.fixed == b.fixed; }
};

/// A parsed signature: the core dimensions of each input and each output.
struct gufunc_signature {
  std::string text;
  std::vector<std::vector<core_dim>> inputs;
  std::vector<std::vector<core_dim>> outputs;
};

namespace detail {
[[noreturn]] inline void signature_error(const std::string& text, std::size_t pos, const std::string& what) {
  throw logic_error("gufunc signature \"" + text + "\": " + what + " at position " + std::to_string(pos));
}
inline void skip_spaces(const std::string& t, std::size_t& p) {
  while (p < t.size() && std::isspace(static_cast<unsigned char>(t[p]))) ++p;
}
inline std::vector<std::vector<core_dim>> parse_arg_list(const std::string& t, std::size_t& p) {
  std::vector<std::vector<core_dim>> list;
  for (;;) {
    skip_spaces(t, p);
    if (p >= t.size() || t[p] != '(') signature_error(t, p, "expected '('");
    ++p;
    std::vector<core_dim> dims;
    skip_spaces(t, p);
    if (p < t.size() && t[p] == ')') {
      ++p;
    } else {
      for (;;) {
        skip_spaces(t, p);
        core_dim d;
        const std::size_t start = p;
        if (p < t.size() && std::isdigit(static_cast<unsigned char>(t[p]))) {
          index_t v = 0;
          while (p < t.size() && std::isdigit(static_cast<unsigned char>(t[p]))) {
            if (v > (index_t{1} << 50)) signature_error(t, start, "fixed dimension too large");
            v = v * 10 + (t[p] - '0');
            ++p;
          }
          d.fixed = v;
        } else if (p < t.size() && (std::isalpha(static_cast<unsigned char>(t[p])) || t[p] == '_')) {
          while (p < t.size() && (std::isalnum(static_cast<unsigned char>(t[p])) || t[p] == '_')) d.name += t[p++];
        } else if (p < t.size() && t[p] == '?') {
          signature_error(t, p, "optional core dimensions ('?') are not supported");
        } else {
          signature_error(t, p, "expected a dimension name or size");
        }
        dims.push_back(d);
        skip_spaces(t, p);
        if (p < t.size() && t[p] == ',') {
          ++p;
          continue;
        }
        if (p < t.size() && t[p] == ')') {
          ++p;
          break;
        }
        signature_error(t, p, "expected ',' or ')'");
      }
    }
    if (dims.size() > static_cast<std::size_t>(max_rank)) {
      signature_error(t, p, "more than max_rank core dimensions");
    }
    list.push_back(std::move(dims));
    skip_spaces(t, p);
    if (p < t.size() && t[p] == ',') {
      ++p;
      continue;
    }
    return list;
  }
}
}  // namespace detail

/// Parses a NumPy-style gufunc signature, e.g. "(n),(n)->()" or "(m,o),(m,o)->(m,o)". Names are
/// identifiers; a number is a fixed size. Throws logic_error with the position of the problem.
inline gufunc_signature parse_signature(const std::string& text) {
  gufunc_signature s;
  s.text = text;
  std::size_t p = 0;
  s.inputs = detail::parse_arg_list(text, p);
  detail::skip_spaces(text, p);
  if (p + 1 >= text.size() || text[p] != '-' || text[p + 1] != '>') detail::signature_error(text, p, "expected '->'");
  p += 2;
  s.outputs = detail::parse_arg_list(text, p);
  detail::skip_spaces(text, p);
  if (p != text.size()) detail::signature_error(text, p, "unexpected trailing text");
  return s;
}

/// The result of binding a signature to argument shapes.
struct gufunc_binding {
  std::map<std::string, index_t> sizes;              ///< each named core dimension's size
  std::vector<index_t> loop_shape;                   ///< broadcast of the arguments' loop dimensions
  std::vector<std::vector<index_t>> output_shapes;   ///< loop_shape + each output's core shape
};

/// Binds `sig` to the inputs' shapes (and, when given, the outputs' shapes): the trailing
/// dimensions of each argument are its core dimensions, the rest broadcast as loop dimensions.
/// Throws logic_error naming the argument, the dimension and both sizes on any mismatch.
inline gufunc_binding bind_signature(const gufunc_signature& sig, const std::vector<std::vector<index_t>>& inputs,
                                     const std::vector<std::vector<index_t>>& outputs = {}) {
  const std::string who = "gufunc \"" + sig.text + "\"";
  if (inputs.size() != sig.inputs.size()) {
    throw logic_error(who + ": the signature has " + std::to_string(sig.inputs.size()) + " inputs but " +
                      std::to_string(inputs.size()) + " were given");
  }
  if (!outputs.empty() && outputs.size() != sig.outputs.size()) {
    throw logic_error(who + ": the signature has " + std::to_string(sig.outputs.size()) + " outputs but " +
                      std::to_string(outputs.size()) + " were given");
  }
  gufunc_binding b;
  std::map<std::string, std::string> origin;
  std::vector<std::vector<index_t>> loops;
  std::vector<std::string> names;
  auto bind = [&](const std::vector<core_dim>& core, const std::vector<index_t>& shape, const std::string& arg) {
    if (shape.size() < core.size()) {
      throw logic_error(who + ": " + arg + " has shape " + detail::shape_string(shape) + " (rank " +
                        std::to_string(shape.size()) + ") but needs at least " + std::to_string(core.size()) +
                        " core dimensions");
    }
    const std::size_t nloop = shape.size() - core.size();
    for (std::size_t k = 0; k < core.size(); ++k) {
      const index_t e = shape[nloop + k];
      const core_dim& d = core[k];
      if (e < 0) {
        throw logic_error(who + ": " + arg + " has negative extent " + std::to_string(e) + " in core dimension " +
                          std::to_string(k));
      }
      if (d.name.empty()) {
        if (e != d.fixed) {
          throw logic_error(who + ": " + arg + " core dimension " + std::to_string(k) + " must be " +
                            std::to_string(d.fixed) + " but is " + std::to_string(e));
        }
        continue;
      }
      auto it = b.sizes.find(d.name);
      if (it == b.sizes.end()) {
        b.sizes[d.name] = e;
        origin[d.name] = arg;
      } else if (it->second != e) {
        throw logic_error(who + ": " + arg + " core dimension '" + d.name + "' has size " + std::to_string(e) +
                          " but " + origin[d.name] + " gives it size " + std::to_string(it->second));
      }
    }
    loops.emplace_back(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(nloop));
    names.push_back(arg);
  };
  for (std::size_t i = 0; i < inputs.size(); ++i) bind(sig.inputs[i], inputs[i], "argument " + std::to_string(i));
  for (std::size_t i = 0; i < outputs.size(); ++i) bind(sig.outputs[i], outputs[i], "output " + std::to_string(i));
  b.loop_shape = broadcast_shapes(loops, who + " (loop dimensions)", &names);
  for (std::size_t i = 0; i < sig.outputs.size(); ++i) {
    std::vector<index_t> shape = b.loop_shape;
    for (const core_dim& d : sig.outputs[i]) {
      if (d.name.empty()) {
        shape.push_back(d.fixed);
        continue;
      }
      auto it = b.sizes.find(d.name);
      if (it == b.sizes.end()) {
        throw logic_error(who + ": output " + std::to_string(i) + " core dimension '" + d.name +
                          "' is not bound by any argument (give the output array)");
      }
      shape.push_back(it->second);
    }
    if (shape.size() > static_cast<std::size_t>(max_rank)) {
      throw logic_error(who + ": output " + std::to_string(i) + " rank " + std::to_string(shape.size()) +
                        " exceeds max_rank");
    }
    b.output_shapes.push_back(std::move(shape));
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i] != b.output_shapes[i]) {
      throw logic_error(who + ": output " + std::to_string(i) + " has shape " + detail::shape_string(outputs[i]) +
                        " but the arguments give " + detail::shape_string(b.output_shapes[i]));
    }
  }
  return b;
}

}  // namespace spillway
