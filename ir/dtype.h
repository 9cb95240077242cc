// Tensor element types as fxfuse sees them, with the spellings of every producer
// (torch.export's ScalarType numbering, torch's Python names, the FX annotation
// abbreviations like "bf16") mapped onto one enum.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fxfuse::ir {

enum class DType : uint8_t {
  Undefined = 0, Bool, U8, I8, I16, I32, I64, F16, BF16, F32, F64,
  F8E4M3FN, F8E5M2, F8E4M3FNUZ, F8E5M2FNUZ, U16, U32, U64, C32, C64, C128, F8E8M0FNU,
};

// Short name used in .fxg text and FX annotations: "bf16", "f32", "f8e4m3fn", "i64", "b8".
std::string_view dtypeName(DType t);
std::optional<DType> dtypeFromName(std::string_view s);      // accepts short names
std::optional<DType> dtypeFromTorchName(std::string_view s); // "torch.bfloat16" / "bfloat16"
std::optional<DType> dtypeFromExportScalarType(int64_t v);   // torch.export ScalarType ints
std::optional<DType> dtypeFromExportScalarTypeName(std::string_view s);  // "BFLOAT16"
std::string_view torchDtypeName(DType t);                    // "torch.bfloat16"
int dtypeBytes(DType t);                                     // 0 for Undefined
bool isFloating(DType t);
bool isFp8(DType t);
bool isComplex(DType t);  // c32, c64, c128
bool isHalf16(DType t);  // f16 or bf16: the "D16" activation types
bool isIntegral(DType t, bool include_bool);
// The value of one little-endian element of type `t` stored in `bytes` (a 0-d tensor's
// payload); nullopt for a payload of the wrong size or a type without an exact decoding
// here (f16, FP8, complex).
std::optional<double> scalarFromBytes(DType t, std::string_view bytes);

}  // namespace fxfuse::ir
