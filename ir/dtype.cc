#include "ir/dtype.h"

#include <array>
#include <cstring>

namespace fxfuse::ir {
namespace {

struct DTypeInfo {
  DType t;
  std::string_view short_name;
  std::string_view torch_name;
  std::string_view export_name;
  int export_id;
  int bytes;
};

constexpr std::array<DTypeInfo, 22> kInfo = {{
    {DType::DTYPE_UNSPECIFIED, "undef", "torch.undefined", "UNKNOWN", 0, 0},
    {DType::BOOL, "b8", "torch.bool", "BOOL", 12, 1},
    {DType::U8, "u8", "torch.uint8", "BYTE", 1, 1},
    {DType::I8, "i8", "torch.int8", "CHAR", 2, 1},
    {DType::I16, "i16", "torch.int16", "SHORT", 3, 2},
    {DType::I32, "i32", "torch.int32", "INT", 4, 4},
    {DType::I64, "i64", "torch.int64", "LONG", 5, 8},
    {DType::F16, "f16", "torch.float16", "HALF", 6, 2},
    {DType::BF16, "bf16", "torch.bfloat16", "BFLOAT16", 13, 2},
    {DType::F32, "f32", "torch.float32", "FLOAT", 7, 4},
    {DType::F64, "f64", "torch.float64", "DOUBLE", 8, 8},
    {DType::F8E4M3FN, "f8e4m3fn", "torch.float8_e4m3fn", "FLOAT8E4M3FN", 29, 1},
    {DType::F8E5M2, "f8e5m2", "torch.float8_e5m2", "FLOAT8E5M2", 30, 1},
    {DType::F8E4M3FNUZ, "f8e4m3fnuz", "torch.float8_e4m3fnuz", "FLOAT8E4M3FNUZ", 31, 1},
    {DType::F8E5M2FNUZ, "f8e5m2fnuz", "torch.float8_e5m2fnuz", "FLOAT8E5M2FNUZ", 32, 1},
    {DType::U16, "u16", "torch.uint16", "UINT16", 28, 2},
    {DType::U32, "u32", "torch.uint32", "UINT32", -1, 4},
    {DType::U64, "u64", "torch.uint64", "UINT64", -1, 8},
    {DType::C32, "c32", "torch.complex32", "COMPLEXHALF", 9, 4},
    {DType::C64, "c64", "torch.complex64", "COMPLEXFLOAT", 10, 8},
    {DType::C128, "c128", "torch.complex128", "COMPLEXDOUBLE", 11, 16},
    {DType::F8E8M0FNU, "f8e8m0fnu", "torch.float8_e8m0fnu", "FLOAT8E8M0FNU", -1, 1},
}};

const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }

}  // namespace

std::string_view dtypeName(DType t) { return info(t).short_name; }
std::string_view torchDtypeName(DType t) { return info(t).torch_name; }
int dtypeBytes(DType t) { return info(t).bytes; }

std::optional<DType> dtypeFromName(std::string_view s) {
  for (const auto& i : kInfo)
    if (i.short_name == s) return i.t;
  // FX annotation spellings that differ from ours.
  if (s == "f8e4m3") return DType::F8E4M3FN;
  return std::nullopt;
}

std::optional<DType> dtypeFromTorchName(std::string_view s) {
  if (s.rfind("torch.", 0) != 0) {
    for (const auto& i : kInfo)
      if (i.torch_name.substr(6) == s) return i.t;
  } else {
    for (const auto& i : kInfo)
      if (i.torch_name == s) return i.t;
  }
  // Python aliases.
  if (s == "torch.float" || s == "float") return DType::F32;
  if (s == "torch.half" || s == "half") return DType::F16;
  if (s == "torch.double" || s == "double") return DType::F64;
  if (s == "torch.long" || s == "long") return DType::I64;
  if (s == "torch.int" || s == "int") return DType::I32;
  return std::nullopt;
}

std::optional<DType> dtypeFromExportScalarType(int64_t v) {
  for (const auto& i : kInfo)
    if (i.export_id == v && i.export_id >= 0) return i.t;
  return std::nullopt;
}

std::optional<DType> dtypeFromExportScalarTypeName(std::string_view s) {
  for (const auto& i : kInfo)
    if (i.export_name == s) return i.t;
  return std::nullopt;
}

bool isFloating(DType t) {
  switch (t) {
    case DType::F16: case DType::BF16: case DType::F32: case DType::F64:
    case DType::F8E4M3FN: case DType::F8E5M2: case DType::F8E4M3FNUZ: case DType::F8E5M2FNUZ:
    case DType::F8E8M0FNU:
      return true;
    default:
      return false;
  }
}

bool isComplex(DType t) { return t == DType::C32 || t == DType::C64 || t == DType::C128; }

bool isFp8(DType t) {
  return t == DType::F8E4M3FN || t == DType::F8E5M2 || t == DType::F8E4M3FNUZ ||
         t == DType::F8E5M2FNUZ || t == DType::F8E8M0FNU;
}

bool isHalf16(DType t) { return t == DType::F16 || t == DType::BF16; }

bool isIntegral(DType t, bool include_bool) {
  switch (t) {
    case DType::U8: case DType::I8: case DType::I16: case DType::I32: case DType::I64:
    case DType::U16: case DType::U32: case DType::U64:
      return true;
    case DType::BOOL:
      return include_bool;
    default:
      return false;
  }
}

std::optional<double> scalarFromBytes(DType t, std::string_view bytes) {
  if (dtypeBytes(t) == 0 || bytes.size() != static_cast<size_t>(dtypeBytes(t))) return std::nullopt;
  auto as = [&](auto zero) {
    decltype(zero) v;
    std::memcpy(&v, bytes.data(), sizeof v);
    return static_cast<double>(v);
  };
  switch (t) {
    case DType::BOOL: return bytes[0] != 0 ? 1.0 : 0.0;
    case DType::U8: return as(uint8_t{});
    case DType::I8: return as(int8_t{});
    case DType::I16: return as(int16_t{});
    case DType::I32: return as(int32_t{});
    case DType::I64: return as(int64_t{});
    case DType::F32: return as(float{});
    case DType::F64: return as(double{});
    case DType::BF16: {
      uint32_t bits = static_cast<uint32_t>(static_cast<uint8_t>(bytes[0])) |
                      static_cast<uint32_t>(static_cast<uint8_t>(bytes[1])) << 8;
      bits <<= 16;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    default: return std::nullopt;
  }
}

}  // namespace fxfuse::ir
