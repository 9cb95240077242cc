// Reading, writing and describing launch plans.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

#include <functional>
#include <map>

#include <fmt/format.h>

#include "compiler/lowering/lowering.h"
#include "ir/checked_math.h"
#include "ir/io.h"
#include "ir/output_set.h"
#include "ir/proto_io.h"
#include "ir/sniff.h"
#include "ir/status.h"
#include "ir/utf8.h"
#include "ir/world_size.h"

namespace fxfuse::lowering {

namespace pb = fxfuse::plan::v1;

namespace {
bool isTextPath(const std::string& path) {
  auto ends = [&](const std::string& s) { return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0; };
  return ends(".txt") || ends(".pbtxt") || ends(".textproto");
}
}  // namespace

std::string planToText(const pb::Plan& p) {
  std::string out;
  google::protobuf::TextFormat::Printer printer;
  printer.SetUseUtf8StringEscaping(true);
  if (!printer.PrintToString(p, &out)) fail("cannot print the plan as text");
  return out;
}

// Deterministic: map entries in key order, so one plan always gives the same bytes (the
// fxfuse_plan Bazel rule embeds them; the default order follows the map's hashing).
std::string planToBinary(const pb::Plan& p) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!p.SerializeToCodedStream(&coded) || coded.HadError()) fail("cannot serialize the plan");
  }
  return out;
}

void savePlan(const pb::Plan& p, const std::string& path) {
  ir::writeOutputFile(path, isTextPath(path) ? planToText(p) : planToBinary(p));
}

namespace {

// Range checks on the plan's numbers, so a hand-edited or corrupt plan is refused here
// rather than sizing allocations or loops: world size, symbol ranges and hints, and every
// tensor's element count, extent and bytes at the hints (checked int64 arithmetic).
void checkPlanRanges(const pb::Plan& p, const std::string& source) {
  if (p.world_size() != 0) checkWorldSize(p.world_size(), source + ": world_size");
  std::map<std::string, int64_t> hints;
  for (const auto& sym : p.symbols()) {
    std::string where = fmt::format("{}: symbol {}", source, sym.name());
    if (!ir::isValidSymbolName(sym.name())) fail("{}: symbol name '{}' is not an identifier", source, sym.name());
    if (sym.has_min() && sym.has_max() && sym.min() > sym.max()) fail("{}: empty range [{}, {}]", where, sym.min(), sym.max());
    if (!sym.has_hint()) continue;
    if (sym.hint() < 0) fail("{}: negative hint {}", where, sym.hint());
    if ((sym.has_min() && sym.hint() < sym.min()) || (sym.has_max() && sym.hint() > sym.max()))
      fail("{}: hint {} outside its range", where, sym.hint());
    hints[sym.name()] = sym.hint();
  }
  if (p.arena().alignment() < 0 || p.arena().alignment() > (int64_t{1} << 20) ||
      (p.arena().alignment() & (p.arena().alignment() - 1)) != 0)
    fail("{}: arena alignment {} is not a power of two up to 1 MiB", source, p.arena().alignment());
  auto atHints = [&](const auto& dims, std::vector<int64_t>& out) {
    out.clear();
    for (const auto& d : dims) {
      auto v = ir::symExprFromProto(d, source).evaluate(hints);
      if (!v) return false;
      out.push_back(*v);
    }
    return true;
  };
  std::vector<int64_t> shape, stride;
  for (const auto& t : p.tensors()) {
    std::string where = fmt::format("{}: tensor {} ('{}') at the symbols' hints", source, t.id(), t.name());
    if (!atHints(t.shape(), shape)) continue;
    int64_t numel = ir::numelOrFail(shape, where);
    ir::bytesOrFail(numel, 8, where);  // 8: the widest plan dtype
    int64_t offset = t.has_offset() ? ir::symExprFromProto(t.offset(), source).evaluate(hints).value_or(0) : 0;
    if (atHints(t.stride(), stride)) ir::extentOrFail(shape, stride, offset, where);
  }
  for (const auto& b : p.buffers()) {
    if (!b.has_size_bytes()) continue;
    auto bytes = ir::symExprFromProto(b.size_bytes(), source).evaluate(hints);
    if (bytes && *bytes < 0) fail("{}: buffer {} has a negative size {}", source, b.id(), *bytes);
  }
}

// Refuses fields this fxfuse does not know (a newer writer's, or corruption: the runtime would
// ignore what they say, and their text form does not read back) and string fields that are
// not UTF-8 (a text plan can spell any bytes with escapes; its binary form cannot carry them).
void checkFields(const google::protobuf::Message& m, const std::string& source) {
  const auto* r = m.GetReflection();
  if (!r->GetUnknownFields(m).empty())
    fail("{}: the plan has a field this fxfuse does not know (in {}; written by a newer version?)", source,
         m.GetDescriptor()->name());
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const auto* f : fields) {
    const bool repeated = f->is_repeated();
    const int n = repeated ? r->FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE)
        checkFields(repeated ? r->GetRepeatedMessage(m, f, i) : r->GetMessage(m, f), source);
      else if (f->type() == google::protobuf::FieldDescriptor::TYPE_STRING &&
               !ir::isUtf8(repeated ? r->GetRepeatedString(m, f, i) : r->GetString(m, f)))
        fail("{}: {}.{} is not UTF-8", source, m.GetDescriptor()->name(), f->name());
    }
  }
}

}  // namespace

void ForEachPlanSymExpr(const pb::Plan& p, const std::function<void(const ir::v1::SymExpr&, const char*, int)>& fn) {
  auto opt = [&](bool has, const ir::v1::SymExpr& e, const char* what, int i) {
    if (has) fn(e, what, i);
  };
  fn(p.arena().peak_bytes(), "arena peak_bytes", -1);
  opt(p.arena().has_no_reuse_bytes(), p.arena().no_reuse_bytes(), "arena no_reuse_bytes", -1);
  for (int i = 0; i < p.tensors_size(); ++i) {
    const auto& t = p.tensors(i);
    for (const auto& e : t.shape()) fn(e, "tensor shape", i);
    for (const auto& e : t.stride()) fn(e, "tensor stride", i);
    fn(t.offset(), "tensor offset", i);
  }
  for (int i = 0; i < p.buffers_size(); ++i) {
    const auto& b = p.buffers(i);
    opt(b.has_size_bytes(), b.size_bytes(), "buffer size_bytes", i);
    opt(b.has_offset() || b.kind() == pb::ARENA, b.offset(), "buffer offset", i);
  }
  for (int i = 0; i < p.steps_size(); ++i) {
    const auto& s = p.steps(i);
    if (s.has_kernel()) {
      for (const auto& e : s.kernel().grid()) fn(e, "step grid", i);
      for (const auto& e : s.kernel().block()) fn(e, "step block", i);
      opt(s.kernel().has_shared_bytes(), s.kernel().shared_bytes(), "step shared_bytes", i);
      for (const auto& a : s.kernel().args())
        if (a.v_case() == pb::KernelArg::kInt) fn(a.int_(), "step argument", i);
    } else if (s.has_matmul()) {
      const auto& m = s.matmul();
      fn(m.m(), "step m", i);
      fn(m.n(), "step n", i);
      fn(m.k(), "step k", i);
      opt(m.has_batch(), m.batch(), "step batch", i);
    } else if (s.has_copy()) {
      fn(s.copy().bytes(), "step bytes", i);
    } else if (s.has_memset()) {
      fn(s.memset().bytes(), "step bytes", i);
    } else if (s.has_collective()) {
      fn(s.collective().count(), "step count", i);
    } else if (s.has_fused_all_reduce_norm()) {
      fn(s.fused_all_reduce_norm().num_tokens(), "step num_tokens", i);
      fn(s.fused_all_reduce_norm().hidden_size(), "step hidden_size", i);
    }
  }
}

pb::Plan parsePlan(const std::string& bytes, bool text, const std::string& source) {
  pb::Plan p;
  bool ok = text ? google::protobuf::TextFormat::ParseFromString(bytes, &p) : p.ParseFromString(bytes);
  if (!ok) fail("{}: not a valid fxfuse launch plan ({} form)", source, text ? "text" : "binary");
  if (p.plan_major() != 1) fail("{}: plan version {} is not supported (expected 1)", source, p.plan_major());
  checkFields(p, source);
  ForEachPlanSymExpr(p, [&](const ir::v1::SymExpr& e, const char* what, int i) {
    (void)ir::symExprFromProto(e, i < 0 ? fmt::format("{}: {}", source, what) : fmt::format("{}: {} {}", source, what, i));
  });
  (void)ir::guardsFromProto(p.guards(), source + ": guards");
  checkPlanRanges(p, source);
  // Structural checks so the runtime can index without bounds surprises.
  auto tensorOk = [&](int t) { return t >= 0 && t < p.tensors_size(); };
  for (const auto& t : p.tensors())
    if (t.buffer() < 0 || t.buffer() >= p.buffers_size() || t.shape_size() != t.stride_size())
      fail("{}: tensor {} is malformed", source, t.id());
  for (int i = 0; i < p.tensors_size(); ++i)
    if (p.tensors(i).id() != i) fail("{}: tensor ids must be dense", source);
  for (const auto& b : p.buffers())
    if (b.kind() == pb::INPUT && (b.input() < 0 || b.input() >= p.inputs_size()))
      fail("{}: buffer {} names input {} out of range", source, b.id(), b.input());
  for (int i = 0; i < p.steps_size(); ++i) {
    const auto& s = p.steps(i);
    std::string where = fmt::format("{}: step {}", source, i);
    if (s.kind_case() == pb::Step::KIND_NOT_SET) fail("{}: empty step", where);
    for (int t : StepTensors(s))
      if (!tensorOk(t)) fail("{}: {} names tensor {}, which the plan does not have", where, describeStep(s), t);
    if (s.has_kernel()) {
      for (const auto& a : s.kernel().args())
        if (a.v_case() == pb::KernelArg::kScalarInput &&
            (a.scalar_input() < 0 || a.scalar_input() >= p.inputs_size() || !p.inputs(a.scalar_input()).is_scalar()))
          fail("{}: argument '{}' names input {}, which is not a lifted scalar", where, a.name(), a.scalar_input());
      if (s.kernel().kernel().rfind("gen.", 0) == 0 &&
          (s.kernel().generated() < 0 || s.kernel().generated() >= p.kernels_size()))
        fail("{}: generated kernel index out of range", where);
    }
  }
  for (const auto& o : p.outputs())
    if (!o.is_symint() && !tensorOk(o.tensor())) fail("{}: output '{}' has no tensor", source, o.name());
  // A generated kernel's name is its entry point in its source (the runtime looks it up;
  // `fxfuse embed` writes it into C++).
  for (int i = 0; i < p.kernels_size(); ++i)
    if (!ir::isValidSymbolName(p.kernels(i).name()))
      fail("{}: generated kernel {} is named '{}', not an identifier", source, i, p.kernels(i).name());
  // A kernel that records bad index reads lists them, and only such a kernel does: the runtime
  // reads the record of the kernels with sites (docs/runtime.md "Index checks"), so a kernel
  // whose record nobody read would leave a bad read unreported.
  for (int i = 0; i < p.kernels_size(); ++i) {
    const bool records = p.kernels(i).source().find("fx_index_error") != std::string::npos;
    if (records != (p.kernels(i).index_sites_size() > 0))
      fail("{}: generated kernel {} ({}) {}", source, i, p.kernels(i).name(),
           records ? "checks index reads but lists no index sites" : "lists index sites but its source checks none");
  }
  return p;
}

std::vector<int> StepTensors(const pb::Step& s) {
  std::vector<int> ids;
  auto optional = [&](std::initializer_list<int> ts) {
    for (int t : ts)
      if (t != -1) ids.push_back(t);
  };
  if (s.has_kernel()) {
    for (const auto& a : s.kernel().args())
      if (a.v_case() == pb::KernelArg::kTensor) ids.push_back(a.tensor());
  } else if (s.has_matmul()) {
    const auto& m = s.matmul();
    ids = {m.a(), m.b(), m.d()};
    optional({m.c(), m.bias(), m.scale_a(), m.scale_b(), m.scale_d()});
  } else if (s.has_copy()) {
    ids = {s.copy().src(), s.copy().dst()};
  } else if (s.has_memset()) {
    ids = {s.memset().dst()};
  } else if (s.has_collective()) {
    ids = {s.collective().input(), s.collective().output()};
  } else if (s.has_fused_all_reduce_norm()) {
    const auto& f = s.fused_all_reduce_norm();
    ids = {f.input()};
    optional({f.residual(), f.weight(), f.allreduce_out(), f.norm_out(), f.quant_out(), f.scale()});
  }
  return ids;
}

pb::Plan loadPlan(const std::string& path) {
  // Text or binary by content, whatever the file is called.
  std::string bytes = ir::readFile(path);
  ir::FileFormat format = ir::sniffFormat(bytes);
  if (format == ir::FileFormat::kUnknown)
    fail("{}: unrecognized input format (tried: {})", path, ir::knownFormats());
  if (format != ir::FileFormat::kPlanText && format != ir::FileFormat::kPlanBinary)
    fail("{}: not a launch plan: it is {} (compile --emit=plan writes plans)", path, ir::formatName(format));
  return parsePlan(bytes, format == ir::FileFormat::kPlanText, path);
}

bool isPlanFile(const std::string& path) {
  ir::FileFormat format = ir::sniffFile(path);
  return format == ir::FileFormat::kPlanText || format == ir::FileFormat::kPlanBinary;
}

bool readOnlyInPlan(const pb::Plan& p, int id) {
  auto bufferOf = [&p](int tensor) {
    return tensor >= 0 && tensor < p.tensors_size() ? p.tensors(tensor).buffer() : -1;
  };
  const int buffer = bufferOf(id);
  if (buffer < 0 || buffer >= p.buffers_size()) return false;
  const pb::Buffer& b = p.buffers(buffer);
  if (b.kind() != pb::INPUT || b.input() < 0 || b.input() >= p.inputs_size()) return false;
  for (const pb::IoTensor& out : p.outputs())
    if (out.role() == pb::MUTATION && bufferOf(out.tensor()) == buffer) return false;
  return true;
}

bool onlyNextStepReads(const pb::Plan& p, int writer, int id, int reader_out) {
  auto bufferOf = [&p](int tensor) {
    return tensor >= 0 && tensor < p.tensors_size() ? p.tensors(tensor).buffer() : -1;
  };
  const int buffer = bufferOf(id);
  if (buffer < 0 || buffer >= p.buffers_size()) return false;
  const pb::Buffer& b = p.buffers(buffer);
  return b.kind() == pb::ARENA && b.first_step() == writer && b.last_step() == writer + 1 &&
         bufferOf(reader_out) != buffer;
}

std::string describeStep(const pb::Step& s) {
  auto sx = [](const fxfuse::ir::v1::SymExpr& e) { return ir::symExprFromProto(e, "plan").str(); };
  if (s.has_kernel()) return s.kernel().kernel();
  if (s.has_matmul()) {
    const auto& m = s.matmul();
    return fmt::format("matmul m={} n={} k={}{}", sx(m.m()), sx(m.n()), sx(m.k()),
                       m.scale_mode() == pb::SCALE_PER_TENSOR ? " fp8" : "");
  }
  if (s.has_collective()) return "collective " + s.collective().op();
  if (s.has_fused_all_reduce_norm()) {
    const auto& f = s.fused_all_reduce_norm();
    return fmt::format("all_reduce+rms_norm{} T={} H={} max_tokens={}", f.quant_out() >= 0 ? "+quant" : "",
                       sx(f.num_tokens()), sx(f.hidden_size()), f.max_tokens());
  }
  if (s.has_copy()) return "copy " + sx(s.copy().bytes()) + " bytes";
  if (s.has_memset()) return "memset";
  return "";
}

std::string describePlan(const pb::Plan& p) {
  std::string out;
  int launches = 0;
  for (int i = 0; i < p.steps_size(); ++i) {
    const auto& s = p.steps(i);
    if (s.has_kernel() || s.has_matmul() || s.has_collective() || s.has_fused_all_reduce_norm()) ++launches;
    std::string nodes;
    for (const auto& n : s.nodes()) nodes += (nodes.empty() ? "" : ",") + n;
    out += fmt::format("step {:3} {:<36} {}\n", i, describeStep(s), nodes);
  }
  out += fmt::format("launches {}\n", launches);
  auto sx = [](const fxfuse::ir::v1::SymExpr& e) { return ir::symExprFromProto(e, "plan").str(); };
  out += fmt::format("arena peak {} bytes (no reuse {}) at the symbols' hints; peak = {}\n",
                     p.arena().peak_bytes_at_hint(), p.arena().no_reuse_bytes_at_hint(),
                     p.arena().has_peak_bytes() ? sx(p.arena().peak_bytes()) : "(none)");
  return out;
}

}  // namespace fxfuse::lowering
