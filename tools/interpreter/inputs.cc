// Seeded inputs by dtype and role (docs/interpreter.md "Inputs"), and weights read from
// the archive's payloads when the module has them.
#include <sys/stat.h>
#include <zip.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "tools/interpreter/interpreter.h"
#include "ir/checked_math.h"
#include "tools/interpreter/ops_common.h"
#include "ir/io.h"
#include "ir/status.h"
#include "ir/fxg.h"
#include "ir/lifted_scalar.h"

namespace fxfuse::interp {
namespace {

// xoshiro256** seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& x : s_) x = splitmix(seed);
  }
  uint64_t next() {
    uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double normal() {
    if (have_) {
      have_ = false;
      return spare_;
    }
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2 * M_PI * u2);
    have_ = true;
    return r * std::cos(2 * M_PI * u2);
  }
  int64_t below(int64_t n) { return n <= 0 ? 0 : static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  static uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
  bool have_ = false;
  double spare_ = 0;
};

uint64_t hashName(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ULL;
  return h;
}

enum class Role { Activation, Ids, Positions, Index, Scale, Cache, Mask, MatWeight, NormWeight, Bias, Ones, KvMetadata };

struct RoleInfo {
  Role role = Role::Activation;
  int64_t bound = 0;     // exclusive upper bound for integer roles
  int64_t fan_in = 0;    // for MatWeight
  std::string why;       // for KvMetadata: the paged_attention argument it feeds
};

bool isTransparent(const std::string& target) {
  static const std::unordered_set<std::string> k = {
      "aten.view", "aten.reshape", "aten._unsafe_view", "aten.unsqueeze", "aten.squeeze", "aten.flatten",
      "aten.expand", "aten.clone", "aten.contiguous", "aten.alias", "aten.detach", "prims.convert_element_type",
      "aten._to_copy", "aten.to", "aten.slice", "aten.select", "aten.permute", "aten.transpose", "aten.t",
      "aten.lift_fresh_copy", "aten.repeat", "aten.expand_as",
  };
  auto dot2 = target.rfind('.');
  return k.count(target.substr(0, dot2)) > 0 || k.count(target) > 0;
}

bool contains(const std::string& s, const char* sub) {
  std::string lo = s;
  for (char& c : lo) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lo.find(sub) != std::string::npos;
}

int64_t dimOf(const Interpreter& in, const ir::Value* v, int64_t d) {
  if (!v || !v->isTensor() || v->type.rank() == 0) return 0;
  int64_t r = static_cast<int64_t>(v->type.rank());
  if (d < 0) d += r;
  if (d < 0 || d >= r) return 0;
  return v->type.shape[d].evaluate(in.bindings()).value_or(0);
}

// The role of graph input `v`, from how the graph uses it (through views and casts).
RoleInfo roleOf(const Interpreter& in, const ir::GraphInput& gi) {
  const ir::Value* v = gi.value;
  RoleInfo info;
  std::vector<const ir::Value*> work = {v};
  std::unordered_set<const ir::Value*> seen;
  static const std::unordered_set<std::string> kScaleArgs = {
      "scale", "scale_a", "scale_b", "output_scale", "a_scales", "b_scales", "scale_ub", "scale_factor",
      "input_scale", "weight_scale", "scale_result", "k_scale", "v_scale",
  };
  // Integer inputs that index several tensors (token ids feeding two embeddings, an index
  // into a gather and a scatter) must be valid for all of them: the smallest bound wins.
  std::optional<RoleInfo> indexing;
  auto note = [&](RoleInfo r) {
    if (!indexing || (r.bound > 0 && (indexing->bound <= 0 || r.bound < indexing->bound))) indexing = std::move(r);
  };
  while (!work.empty()) {
    const ir::Value* cur = work.back();
    work.pop_back();
    if (!seen.insert(cur).second) continue;
    for (const ir::Node* u : cur->users()) {
      const std::string& t = u->target;
      auto argIs = [&](const std::string& name, int pos) { return u->input(name, pos) == cur; };
      if (isTransparent(t) && u->input("self", 0) == cur) {
        for (const ir::Value* o : u->outputs())
          if (o) work.push_back(o);
        if (t.rfind("prims.convert_element_type", 0) == 0 && u->input("a", 0) == cur)
          for (const ir::Value* o : u->outputs())
            if (o) work.push_back(o);
        continue;
      }
      if (t.rfind("prims.convert_element_type", 0) == 0 && u->input("a", 0) == cur) {
        for (const ir::Value* o : u->outputs())
          if (o) work.push_back(o);
        continue;
      }
      if (t.rfind("aten.embedding", 0) == 0 && argIs("indices", 1)) {
        note({Role::Ids, dimOf(in, u->input("weight", 0), 0), 0, "token ids of " + u->name});
        continue;
      }
      if (t.rfind("_C.rotary_embedding", 0) == 0 && argIs("positions", 0)) {
        note({Role::Positions, dimOf(in, u->input("cos_sin_cache", 4), 0), 0, "positions of " + u->name});
        continue;
      }
      if (t.rfind("fxfuse.paged_attention", 0) == 0)
        for (const char* arg : {"slot_mapping", "block_table", "seq_lens", "query_start_loc"})
          if (argIs(arg, -1)) return {Role::KvMetadata, 0, 0, arg};
      if (t.rfind("_C.rotary_embedding", 0) == 0 && argIs("cos_sin_cache", 4)) {
        return {Role::Cache, 0, 0, "rotary cache of " + u->name};
      }
      // Selections pass their input's values through: a table of ids (a hash-routing buffer
      // read at the token ids) is bounded by where those values are used as an index.
      bool selects = t.rfind("aten.index.", 0) == 0 || t.rfind("aten._unsafe_index.", 0) == 0 ||
                     t.rfind("aten.index_select", 0) == 0 || t.rfind("aten.gather", 0) == 0;
      if (selects && u->input("self", 0) == cur) {
        for (const ir::Value* o : u->outputs())
          if (o) work.push_back(o);
        continue;
      }
      bool dim_index = t.rfind("aten.index_select", 0) == 0 || t.rfind("aten.gather", 0) == 0 ||
                       t.rfind("aten.scatter", 0) == 0 || t.rfind("aten.index_add", 0) == 0;
      if (dim_index && argIs("index", 2)) {
        auto dim = u->arg("dim", 1);
        note({Role::Index, dimOf(in, u->input("self", 0), dim ? dim->asInt().value_or(0) : 0), 0,
              "index of " + u->name});
        continue;
      }
      if (t.rfind("aten.index.", 0) == 0 || t.rfind("aten._unsafe_index.", 0) == 0 ||
          t.rfind("aten.index_put", 0) == 0 || t.rfind("aten._unsafe_index_put", 0) == 0) {
        const ir::Attr* idx = u->arg("indices", 1);
        if (idx && idx->kind == ir::Attr::Kind::List)
          for (size_t k = 0; k < idx->list.size(); ++k)
            if (idx->list[k].kind == ir::Attr::Kind::Value && idx->list[k].value == cur)
              note({Role::Index, dimOf(in, u->input("self", 0), static_cast<int64_t>(k)), 0, "index of " + u->name});
      }
      if (indexing) continue;  // an indexing use decides; other uses of the same ids do not
      if (t.rfind("aten.reciprocal", 0) == 0) return {Role::Scale, 0, 0, "reciprocal in " + u->name};
      for (const auto& a : u->args()) {
        if (a.value.kind != ir::Attr::Kind::Value || a.value.value != cur) continue;
        if (kScaleArgs.count(a.name)) return {Role::Scale, 0, 0, "'" + a.name + "' of " + u->name};
        if (a.name == "attn_mask" || a.name == "attn_bias") return {Role::Mask, 0, 0, "mask of " + u->name};
        if (a.name == "cos_sin_cache") return {Role::Cache, 0, 0, "rotary cache of " + u->name};
        if ((a.name == "weight" || a.name == "rms_gamma") && t.rfind("aten.linear", 0) != 0 &&
            t.rfind("aten.embedding", 0) != 0)
          return {Role::NormWeight, 0, 0, "norm weight of " + u->name};
      }
      if (t.rfind("aten.linear", 0) == 0 && argIs("weight", 1))
        return {Role::MatWeight, 0, dimOf(in, cur, -1), "weight of " + u->name};
      if ((t.rfind("aten.mm", 0) == 0 || t.rfind("aten._scaled_mm", 0) == 0 || t.rfind("aten.bmm", 0) == 0) &&
          argIs("mat2", 1))
        return {Role::MatWeight, 0, dimOf(in, cur, -2), "mat2 of " + u->name};
      if (t.rfind("aten.addmm", 0) == 0 && argIs("mat2", 2))
        return {Role::MatWeight, 0, dimOf(in, cur, -2), "mat2 of " + u->name};
      if (t.rfind("_C.cutlass_scaled_mm", 0) == 0 && argIs("b", 2))
        return {Role::MatWeight, 0, dimOf(in, cur, -2), "b of " + u->name};
    }
  }
  if (indexing) return *indexing;
  const std::string& name = v->name.empty() ? gi.target : v->name;
  std::string full = name + " " + gi.target;
  bool param = gi.kind == ir::InputKind::Parameter || gi.kind == ir::InputKind::Buffer ||
               gi.kind == ir::InputKind::ConstantTensor;
  bool integral = category(v->type.dtype) != Category::Float;
  if (contains(full, "scale")) return {Role::Scale, 0, 0, "name"};
  if (integral && contains(full, "position")) return {Role::Positions, 0, 0, "name"};
  if (integral && (contains(full, "input_ids") || contains(full, "token"))) return {Role::Ids, 0, 0, "name"};
  if (contains(full, "mask")) return {Role::Ones, 0, 0, "name (mask)"};
  if (contains(full, "bias")) return {Role::Bias, 0, 0, "name"};
  if ((param || contains(full, "weight")) && v->type.rank() == 1) return {Role::NormWeight, 0, 0, "1-D parameter"};
  if ((param || contains(full, "weight")) && v->type.rank() >= 2)
    return {Role::MatWeight, 0, dimOf(in, v, -1), "parameter"};
  return info;
}

double fp8Sample(Rng& r, DType t) { return roundTo(r.uniform(-64.0, 64.0), t); }

// Fills `t` (dense, any strides): position-dependent roles (positions, masks) in logical
// order, i.i.d. ones directly in storage order.
Tensor randomTensor(Tensor t, const RoleInfo& role, Rng& rng) {
  const Shape& shape = t.shape;
  DType dt = t.dtype;
  bool logical = role.role == Role::Positions || role.role == Role::Mask;
  if (logical && !t.isContiguous()) {
    Tensor c = randomTensor(Tensor::uninitialized(shape, dt), role, rng);
    copyInto(t, c);
    return t;
  }
  auto& d = *t.storage;
  int64_t n = static_cast<int64_t>(d.size());
  bool is_float = category(dt) == Category::Float;
  switch (role.role) {
    case Role::Ids:
    case Role::Index: {
      int64_t b = role.bound > 0 ? role.bound : 16;
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<double>(rng.below(b));
      break;
    }
    case Role::Positions: {
      if (role.bound > 0) {
        for (int64_t i = 0; i < n; ++i) d[i] = static_cast<double>(rng.below(role.bound));
      } else {
        int64_t last = shape.empty() ? 1 : shape.back();
        for (int64_t i = 0; i < n; ++i) d[i] = static_cast<double>(i % std::max<int64_t>(last, 1));
      }
      break;
    }
    case Role::Scale:
      for (int64_t i = 0; i < n; ++i) d[i] = roundTo(is_float ? rng.uniform(0.01, 0.05) : 1.0, dt);
      break;
    case Role::Cache:
      for (int64_t i = 0; i < n; ++i) d[i] = roundTo(rng.uniform(-1.0, 1.0), dt);
      break;
    case Role::Mask: {
      if (dt == DType::BOOL && shape.size() >= 2) {
        int64_t rows = shape[shape.size() - 2], cols = shape.back();
        for (int64_t i = 0; i < n; ++i) {
          int64_t c = i % cols, r = (i / cols) % rows;
          d[i] = c <= r + (cols - rows) ? 1.0 : 0.0;  // causal, bottom-right aligned
        }
      } else if (dt == DType::BOOL) {
        for (int64_t i = 0; i < n; ++i) d[i] = 1.0;
      } else {
        for (int64_t i = 0; i < n; ++i) d[i] = roundTo(rng.uniform(-1.0, 0.0), dt);
      }
      break;
    }
    case Role::KvMetadata:
      fail("internal: paged-attention metadata is written from the batch plan");
    case Role::Ones:
      for (int64_t i = 0; i < n; ++i) d[i] = 1.0;
      break;
    case Role::NormWeight:
      for (int64_t i = 0; i < n; ++i) d[i] = roundTo(is_float ? rng.uniform(0.5, 1.5) : 1.0, dt);
      break;
    case Role::Bias:
      for (int64_t i = 0; i < n; ++i) d[i] = roundTo(is_float ? rng.uniform(-0.1, 0.1) : 0.0, dt);
      break;
    case Role::MatWeight: {
      if (ir::isFp8(dt)) {
        for (int64_t i = 0; i < n; ++i) d[i] = fp8Sample(rng, dt);
        break;
      }
      double b = std::sqrt(3.0 / static_cast<double>(std::max<int64_t>(role.fan_in, 1)));
      for (int64_t i = 0; i < n; ++i) d[i] = roundTo(is_float ? rng.uniform(-b, b) : rng.below(3) - 1.0, dt);
      break;
    }
    case Role::Activation:
      if (dt == DType::BOOL) {
        for (int64_t i = 0; i < n; ++i) d[i] = static_cast<double>(rng.below(2));
      } else if (ir::isFp8(dt)) {
        for (int64_t i = 0; i < n; ++i) d[i] = fp8Sample(rng, dt);
      } else if (is_float) {  // N(0, 1)
        for (int64_t i = 0; i < n; ++i) d[i] = roundTo(rng.normal(), dt);
      } else {
        for (int64_t i = 0; i < n; ++i) d[i] = static_cast<double>(rng.below(16));
      }
      break;
  }
  return t;
}

// Reads a weight payload from its archive member; an undefined tensor when unavailable.
Tensor loadPayload(const ir::WeightInfo& w) {
  if (w.archive_path.empty() || w.member.empty()) return Tensor{};
  int err = 0;
  zip_t* z = zip_open(w.archive_path.c_str(), ZIP_RDONLY, &err);
  if (!z) return Tensor{};
  Tensor result;
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(z, w.member.c_str(), 0, &st) == 0 && (st.valid & ZIP_STAT_SIZE)) {
    struct stat ast {};
    size_t budget = ir::decompressedBudget(::stat(w.archive_path.c_str(), &ast) == 0 ? static_cast<size_t>(ast.st_size) : 0);
    if (st.size > budget) {
      zip_close(z);
      fail("{}: {}: member declares {} bytes, more than {} for this archive: refusing a likely zip bomb",
           w.archive_path, w.member, st.size, budget);
    }
    zip_file_t* f = zip_fopen(z, w.member.c_str(), 0);
    if (f) {
      std::string bytes(static_cast<size_t>(st.size), '\0');
      zip_int64_t got = zip_fread(f, bytes.data(), st.size);
      char extra;  // reading past the end makes libzip check the CRC-32
      zip_int64_t more = got == static_cast<zip_int64_t>(st.size) ? zip_fread(f, &extra, 1) : 0;
      std::string crc_error = more < 0 ? zip_file_strerror(f) : "";
      zip_fclose(f);
      if (!crc_error.empty()) {
        zip_close(z);
        fail("{}: {}: cannot read weight payload ({})", w.archive_path, w.member, crc_error);
      }
      int eb = ir::dtypeBytes(w.type.dtype);
      if (got == static_cast<zip_int64_t>(st.size) && eb > 0) {
        if (w.length) bytes = bytes.substr(std::min<size_t>(w.offset, bytes.size()), w.length);
        size_t n = bytes.size() / static_cast<size_t>(eb);
        auto storage = std::make_shared<Storage>(n);
        for (size_t i = 0; i < n; ++i) {
          uint64_t bits = 0;
          std::memcpy(&bits, bytes.data() + i * eb, static_cast<size_t>(eb));
          (*storage)[i] = fromBits(bits, w.type.dtype);
        }
        Shape shape, strides;
        bool ok = true;
        for (const auto& s : w.type.shape) {
          if (!s.isInt()) ok = false;
          shape.push_back(s.isInt() ? s.intValue() : 0);
        }
        for (const auto& s : w.type.stride) strides.push_back(s.isInt() ? s.intValue() : 0);
        if (strides.size() != shape.size()) strides = contiguousStrides(shape);
        if (ok) {
          Tensor t;
          t.dtype = w.type.dtype;
          t.shape = shape;
          t.strides = strides;
          t.storage = storage;
          // Negative strides or sizes (refused at import too) never reach the copy loops.
          auto extent = ir::checkedExtent(shape, strides);
          auto numel = ir::checkedNumel(shape);
          if (numel && extent && (*numel == 0 || *extent <= static_cast<int64_t>(n))) result = t;
        }
      }
    }
  }
  zip_close(z);
  return result;
}

}  // namespace

// Refuses inputs whose storage together is over the interpreter's budget before the first one
// is made (an 8B model's weights would otherwise fill the budget for half a minute first).
void Interpreter::requireRoomForInputs(const std::set<size_t>& given) {
  const ir::Graph& g = *entry_;
  int64_t total = 0, largest = 0;
  std::string largest_name;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::Value* v = g.inputs()[i].value;
    if (!v->isTensor() || given.count(i) || ir::isLiftedScalarInput(v)) continue;
    const int64_t n = ir::numelOrFail(evalShape(v->type.shape, fmt::format("input '{}'", v->name)), "an input");
    total = ir::addOrFail(total, n, "the graph's inputs");
    if (n > largest) largest = n, largest_name = v->name;
  }
  if (total > 0)
    Storage::requireRoomFor(total, fmt::format("the {} elements of graph @{}'s inputs (the largest: '{}', {} elements)",
                                               total, g.name, largest_name, largest));
}

std::vector<RValue> Interpreter::makeInputs(uint64_t seed, const std::set<size_t>& given) {
  const ir::Graph& g = *entry_;
  requireRoomForInputs(given);
  std::vector<RValue> out;
  std::unordered_map<std::string, const ir::WeightInfo*> weights;
  for (const auto& w : module_.weights) weights[w.fqn] = &w;
  input_notes_.clear();
  for (const auto& gi : g.inputs()) {
    const ir::Value* v = gi.value;
    std::string ctx = fmt::format("input '{}'", v->name);
    if (v->kind == ir::ValueKind::SymInt) {
      if (!v->sym) fail("{}: SymInt input without an expression", ctx);
      out.push_back(RValue::ofInt(evalSize(*v->sym, ctx)));
      input_notes_.push_back("SymInt " + v->sym->str());
      continue;
    }
    if (v->kind == ir::ValueKind::SymFloat || v->kind == ir::ValueKind::SymBool) {
      out.push_back(v->kind == ir::ValueKind::SymBool ? RValue::ofBool(true) : RValue::ofFloat(1.0));
      input_notes_.push_back("symbolic scalar");
      continue;
    }
    if (!v->isTensor()) {
      out.push_back(RValue{});
      input_notes_.push_back("opaque (None)");
      continue;
    }
    Shape shape = evalShape(v->type.shape, ctx);
    DType dt = v->type.dtype;
    if (dt == DType::DTYPE_UNSPECIFIED) fail("{}: unknown dtype", ctx);
    if (ir::isLiftedScalarInput(v)) {
      // A lifted Python number: its recorded / --const value; 1.0 (a valid eps or bound of
      // either sign) when unknown, said in the note.
      out.push_back(RValue::ofTensor(Tensor::scalar(v->scalar_value.value_or(1.0), dt)));
      input_notes_.push_back(v->scalar_value ? "lifted scalar = " + ir::formatFloat(*v->scalar_value)
                                             : "lifted scalar, value unknown: 1.0 (pass --const " + v->name + "=VALUE)");
      continue;
    }
    auto wi = weights.find(gi.target);
    if (wi != weights.end()) {
      Tensor t = loadPayload(*wi->second);
      if (t.defined() && t.shape == shape && t.dtype == dt) {
        out.push_back(RValue::ofTensor(t));
        input_notes_.push_back("archive payload " + wi->second->member);
        continue;
      }
    }
    RoleInfo role = roleOf(*this, gi);
    if (role.role == Role::KvMetadata) {
      if (!kv_plan_) fail("{}: paged-attention metadata but no serving batch was planned", ctx);
      out.push_back(RValue::ofTensor(kvMetadataTensor(*kv_plan_, role.why, shape, dt)));
      input_notes_.push_back(fmt::format("kv metadata ({} of paged attention, the kv batch above)", role.why));
      continue;
    }
    if (given.count(out.size())) {  // the caller's values replace this input: shape and dtype only
      Tensor placeholder;
      placeholder.dtype = dt;
      placeholder.shape = shape;
      placeholder.strides = contiguousStrides(shape);
      out.push_back(RValue::ofTensor(placeholder));
      input_notes_.push_back("given by the caller");
      continue;
    }
    uint64_t rank_mix = role.role == Role::Activation ? static_cast<uint64_t>(options_.rank) * 0x9E3779B97F4A7C15ull : 0;
    Rng rng(seed ^ hashName(v->name.empty() ? gi.target : v->name) ^ rank_mix);
    // Keep the declared strides when they describe a dense layout (a transposed weight).
    Tensor t = Tensor::uninitialized(shape, dt);
    Shape st;
    bool ok = v->type.stride.size() == shape.size();
    for (size_t k = 0; ok && k < shape.size(); ++k) {
      auto s = v->type.stride[k].evaluate(env_);
      if (!s) ok = false;
      else st.push_back(*s);
    }
    if (ok && st != t.strides) {
      Tensor probe;
      probe.shape = shape;
      probe.strides = st;
      if (probe.isNonOverlappingAndDense()) t = Tensor::emptyStrided(shape, st, dt, 0.0);
    }
    t = randomTensor(t, role, rng);
    static const char* kRoleNames[] = {"activation", "token ids", "positions", "index", "scale", "rotary cache",
                                       "mask", "matrix weight", "norm weight", "bias", "ones",
                                       "kv metadata"};
    std::string note = kRoleNames[static_cast<int>(role.role)];
    if (role.bound > 0) note += fmt::format(" in [0, {})", role.bound);
    if (!role.why.empty()) note += " (" + role.why + ")";
    input_notes_.push_back(note);
    out.push_back(RValue::ofTensor(t));
  }
  return out;
}

}  // namespace fxfuse::interp
