// Tensor element types as fxfuse sees them, with the spellings of every producer
// (torch.export's ScalarType numbering, torch's Python names, the FX annotation
// abbreviations like "bf16") mapped onto one enum.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "proto/dtype.h"

namespace fxfuse::ir {

// fxfuse::DType (proto/dtype.h, generated from fxfuse_ir.proto): the one dtype enum.
using ::fxfuse::DType;

// Short name used in .fxg text and FX annotations: "bf16", "f32", "f8e4m3fn", "i64", "b8".
std::string_view dtypeName(DType t);
std::optional<DType> dtypeFromName(std::string_view s);      // accepts short names
std::optional<DType> dtypeFromTorchName(std::string_view s); // "torch.bfloat16" / "bfloat16"
std::optional<DType> dtypeFromExportScalarType(int64_t v);   // torch.export ScalarType ints
std::optional<DType> dtypeFromExportScalarTypeName(std::string_view s);  // "BFLOAT16"
std::string_view torchDtypeName(DType t);                    // "torch.bfloat16"
int dtypeBytes(DType t);                                     // 0 for DTYPE_UNSPECIFIED
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
