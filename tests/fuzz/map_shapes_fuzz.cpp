// Coverage-guided fuzz target for the map module's parsers: gufunc signatures and NumPy
// broadcasting (libFuzzer; see tests/fuzz/README.md).
//
// Input: a signature text up to the first NUL byte, then shapes: each shape is a rank byte
// (0-7 used, more is allowed through to test the rank limit) and that many extents, each one
// byte (small extents, so shapes often agree) or, when the byte's top bit is set, 8 bytes of
// any int64 (negative and huge extents). Every call must succeed with a consistent result or
// throw spillway::logic_error; a crash, an overflow (UBSan) or another exception is a finding.
#include <spillway/map/shape.hpp>
#include <spillway/map/signature.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {
[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "map_shapes_fuzz: %s\n", what);
  std::abort();
}

struct reader {
  const std::uint8_t* p;
  std::size_t n;
  bool take(std::uint8_t& b) {
    if (n == 0) return false;
    b = *p++;
    --n;
    return true;
  }
  bool shape(std::vector<spillway::index_t>& s) {
    std::uint8_t r;
    if (!take(r)) return false;
    s.clear();
    for (unsigned k = 0; k < (r & 15u); ++k) {
      std::uint8_t e;
      if (!take(e)) return false;
      if ((e & 0x80u) != 0 && n >= 8) {
        std::uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
        p += 8;
        n -= 8;
        std::int64_t x;
        std::memcpy(&x, &v, 8);
        s.push_back(x);
      } else {
        s.push_back(e & 7u);
      }
    }
    return true;
  }
};

void check_broadcast(const std::vector<std::vector<spillway::index_t>>& shapes, const std::vector<spillway::index_t>& out) {
  std::size_t rank = 0;
  for (const auto& s : shapes) rank = s.size() > rank ? s.size() : rank;
  if (out.size() != rank) finding("broadcast rank is not the largest input rank");
  bool empty = false;
  for (auto e : out) empty = empty || e == 0;
  spillway::index_t count = 1;
  for (auto e : out) {
    if (e < 0) finding("negative broadcast extent");
    if (!empty && count > std::numeric_limits<spillway::index_t>::max() / e) finding("element count overflows");
    if (!empty) count *= e;
  }
  for (const auto& s : shapes) {
    for (std::size_t k = 0; k < s.size(); ++k) {
      const auto o = out[rank - s.size() + k];
      if (s[k] != 1 && s[k] != o) finding("an input does not broadcast to the result");
    }
  }
}
// The operands' element offsets walked over the broadcast loop, before and after collapse(),
// must be the same sequence (the collapse only merges and drops dimensions).
void check_collapse(const std::vector<std::vector<spillway::index_t>>& shapes, const std::vector<spillway::index_t>& out) {
  spillway::loop_plan plan;
  plan.extents = out;
  spillway::index_t count = 1;
  for (auto e : out) count = (e == 0 || count == 0) ? 0 : (e > 4096 || count * e > 4096) ? 4097 : count * e;
  if (count == 0 || count > 4096) return;  // empty loops need no walk (and their strides may overflow)
  for (const auto& s : shapes) {
    std::vector<spillway::index_t> strides(s.size());
    spillway::index_t st = 1;
    for (std::size_t k = s.size(); k-- > 0;) {
      strides[k] = st;
      st *= s[k] == 0 ? 1 : s[k];
    }
    plan.strides.push_back(spillway::broadcast_strides(s, strides, out));
  }
  const spillway::loop_plan c = spillway::collapse(plan);
  if (c.size() != plan.size()) finding("collapse changed the element count");
  auto walk = [](const spillway::loop_plan& p, std::size_t o) {
    std::vector<spillway::index_t> offs;
    const spillway::index_t n = p.size();
    std::vector<spillway::index_t> idx(p.extents.size(), 0);
    for (spillway::index_t i = 0; i < n; ++i) {
      spillway::index_t off = 0;
      for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * p.strides[o][d];
      offs.push_back(off);
      for (std::size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < p.extents[d]) break;
        idx[d] = 0;
      }
    }
    return offs;
  };
  for (std::size_t o = 0; o < plan.strides.size(); ++o) {
    if (walk(plan, o) != walk(c, o)) finding("collapse changed an operand's walk");
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const void* nul = std::memchr(data, 0, size);
  const std::size_t tlen = nul != nullptr ? static_cast<std::size_t>(static_cast<const std::uint8_t*>(nul) - data) : size;
  const std::string text(reinterpret_cast<const char*>(data), tlen);
  reader rd{data + tlen + (nul != nullptr ? 1 : 0), size - tlen - (nul != nullptr ? 1 : 0)};

  // 1. Broadcasting on its own: up to 4 shapes.
  std::vector<std::vector<spillway::index_t>> shapes;
  std::vector<spillway::index_t> s;
  while (shapes.size() < 4 && rd.shape(s)) shapes.push_back(s);
  try {
    const std::vector<spillway::index_t> out = spillway::broadcast_shapes(shapes);
    check_broadcast(shapes, out);
    check_collapse(shapes, out);
  } catch (const spillway::logic_error&) {
  }
  // Reduction axes from the remaining bytes, against the first shape's rank.
  {
    std::vector<int> axes;
    std::uint8_t b;
    while (axes.size() < 4 && rd.take(b)) axes.push_back(static_cast<int>(static_cast<std::int8_t>(b)) % 10);
    const int rank = shapes.empty() ? 0 : static_cast<int>(shapes[0].size());
    try {
      const std::vector<bool> m = spillway::reduction_mask(axes, rank, "fuzz");
      if (static_cast<int>(m.size()) != rank) finding("reduction mask of the wrong rank");
      for (int a : axes) {
        if (a < -rank || a >= rank || !m[static_cast<std::size_t>(a < 0 ? a + rank : a)]) finding("axis not in the mask");
      }
    } catch (const spillway::logic_error&) {
    }
  }

  // 2. The signature, then binding it to the same shapes (inputs first, outputs after).
  spillway::gufunc_signature sig;
  try {
    sig = spillway::parse_signature(text);
  } catch (const spillway::logic_error&) {
    return 0;
  }
  if (sig.inputs.empty() || sig.outputs.empty()) finding("parsed a signature without inputs or outputs");
  std::vector<std::vector<spillway::index_t>> ins, outs;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (ins.size() < sig.inputs.size()) ins.push_back(shapes[i]);
    else outs.push_back(shapes[i]);
  }
  if (outs.size() != sig.outputs.size()) outs.clear();
  try {
    const spillway::gufunc_binding b = spillway::bind_signature(sig, ins, outs);
    if (b.output_shapes.size() != sig.outputs.size()) finding("wrong number of output shapes");
    for (std::size_t o = 0; o < sig.outputs.size(); ++o) {
      if (b.output_shapes[o].size() != b.loop_shape.size() + sig.outputs[o].size()) finding("wrong output rank");
    }
    for (const auto& kv : b.sizes) {
      if (kv.second < 0) finding("a core dimension bound to a negative size");
    }
  } catch (const spillway::logic_error&) {
  }
  return 0;
}
