// torch.save artifacts: a pickle (protocol 2) of tensors whose storages are zip records.
//
// A tensor is pickled as torch does it: `torch._utils._rebuild_tensor_v2(storage, offset,
// size, stride, requires_grad, OrderedDict())` with the storage a persistent id
// ('storage', torch.<Type>Storage, key, location, numel); dtypes without a legacy storage
// class (FP8) use `_rebuild_tensor_v3(..., dtype)` over a torch.storage.UntypedStorage of bytes.
#include "ir/torch_save.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "ir/status.h"

namespace fxfuse::ir {
namespace {

// The opcodes of pickle protocol 2 that these artifacts use.
class Pickler {
 public:
  Pickler() { out_ += "\x80\x02"; }
  void global(std::string_view module, std::string_view name) { out_ += fmt::format("c{}\n{}\n", module, name); }
  void mark() { out_ += '('; }
  void tupleFromMark() { out_ += 't'; }
  void emptyTuple() { out_ += ')'; }
  void emptyDict() { out_ += '}'; }
  void tuple2() { out_ += '\x86'; }
  void reduce() { out_ += 'R'; }
  void persistentId() { out_ += 'Q'; }
  void boolean(bool b) { out_ += b ? '\x88' : '\x89'; }
  void string(std::string_view s) {
    out_ += 'X';
    le(static_cast<uint32_t>(s.size()), 4);
    out_ += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      out_ += 'K';
      out_ += static_cast<char>(v);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      le(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    } else {
      out_ += "\x8a\x08";  // LONG1, 8 bytes two's complement
      le(static_cast<uint64_t>(v), 8);
    }
  }
  void ints(const std::vector<int64_t>& v) {
    mark();
    for (int64_t x : v) integer(x);
    tupleFromMark();
  }
  std::string finish() { return out_ + '.'; }

 private:
  void le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string out_;
};

// torch's legacy storage class of a dtype; empty for dtypes saved as untyped bytes.
std::string legacyStorage(DType t) {
  switch (t) {
    case DType::F64: return "DoubleStorage";
    case DType::F32: return "FloatStorage";
    case DType::F16: return "HalfStorage";
    case DType::BF16: return "BFloat16Storage";
    case DType::I64: return "LongStorage";
    case DType::I32: return "IntStorage";
    case DType::I16: return "ShortStorage";
    case DType::I8: return "CharStorage";
    case DType::U8: return "ByteStorage";
    case DType::BOOL: return "BoolStorage";
    default: return {};
  }
}

int64_t hinted(const SymExpr& e, const SymbolTable& symbols, const std::string& where) {
  std::set<std::string> syms;
  e.collectSymbols(syms);
  std::map<std::string, int64_t> env;
  for (const auto& s : syms) env[s] = exampleSize(symbols.find(s));
  auto v = e.evaluate(env);
  if (!v || *v < 0) fail("{}: sample inputs: size {} has no value at the symbols' hints", where, e.str());
  return *v;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> zeroSampleInputRecords(const Graph& g, const SymbolTable& symbols,
                                                                         const std::string& where) {
  Pickler p;
  std::map<DType, int> key_of;  // one one-element zero storage per dtype
  p.mark();                     // the args tuple
  for (const auto& in : g.inputs()) {
    if (in.kind != InputKind::UserInput) continue;
    const Value* v = in.value;
    if (v->kind == ValueKind::SymInt) {
      if (!v->sym) fail("{}: sample inputs: SymInt input '{}' has no expression", where, v->name);
      p.integer(hinted(*v->sym, symbols, where));
      continue;
    }
    if (v->kind != ValueKind::Tensor)
      fail("{}: sample inputs: input '{}' is not a tensor or SymInt", where, v->name);
    DType t = v->type.dtype;
    std::string storage = legacyStorage(t);
    if (storage.empty() && !isFp8(t))
      fail("{}: sample inputs: input '{}' has dtype {}, which fxfuse cannot write in torch.save's format", where,
           v->name, dtypeName(t));
    int key = key_of.emplace(t, static_cast<int>(key_of.size())).first->second;
    std::vector<int64_t> sizes;
    for (const auto& d : v->type.shape) sizes.push_back(hinted(d, symbols, where));
    p.global("torch._utils", storage.empty() ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
    p.mark();
    p.mark();  // persistent id of the storage
    p.string("storage");
    // torch pickles the untyped storage class by its module, torch.storage (the weights-only
    // loader refuses the torch.UntypedStorage spelling)
    if (storage.empty()) p.global("torch.storage", "UntypedStorage");
    else p.global("torch", storage);
    p.string(std::to_string(key));
    p.string("cpu");
    p.integer(1);  // elements (bytes for an untyped storage: FP8 has one byte per element)
    p.tupleFromMark();
    p.persistentId();
    p.integer(0);
    p.ints(sizes);
    p.ints(std::vector<int64_t>(sizes.size(), 0));
    p.boolean(false);
    p.global("collections", "OrderedDict");
    p.emptyTuple();
    p.reduce();
    if (storage.empty()) {
      std::string_view torch_name = torchDtypeName(t);  // "torch.float8_e4m3fn"
      p.global("torch", torch_name.substr(torch_name.find('.') + 1));
    }
    p.tupleFromMark();
    p.reduce();
  }
  p.tupleFromMark();
  p.emptyDict();
  p.tuple2();
  std::vector<std::pair<std::string, std::string>> records;
  records.emplace_back("data.pkl", p.finish());
  records.emplace_back(".format_version", "1");
  records.emplace_back(".storage_alignment", "64");
  records.emplace_back("byteorder", "little");
  for (const auto& [t, key] : key_of) records.emplace_back(fmt::format("data/{}", key), std::string(dtypeBytes(t), '\0'));
  records.emplace_back("version", "3\n");
  return records;
}

}  // namespace fxfuse::ir
