// Conversion between the in-memory Module and the protobuf schema (proto/fxfuse_ir.proto),
// and reading/writing it as binary `.pb` or protobuf JSON `.json`.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ir/graph.h"
#include "proto/fxfuse_ir.pb.h"

namespace fxfuse::ir {

void moduleToProto(Module& m, fxfuse::ir::v1::Module* out);
// `source` names the file in error messages.
std::unique_ptr<Module> moduleFromProto(const fxfuse::ir::v1::Module& pm, const std::string& source);

std::string moduleToBinary(Module& m);
std::string moduleToJson(Module& m);
std::unique_ptr<Module> moduleFromBinary(const std::string& bytes, const std::string& source);
std::unique_ptr<Module> moduleFromJson(const std::string& json, const std::string& source);

// SymExpr alone, for other schemas that import fxfuse_ir.proto (the launch plan).
// `context` names the file/field in error messages.
void symExprToProto(const SymExpr& e, fxfuse::ir::v1::SymExpr* out);
SymExpr symExprFromProto(const fxfuse::ir::v1::SymExpr& p, const std::string& context);
fxfuse::ir::v1::Guard guardToProto(const Guard& g);
std::vector<Guard> guardsFromProto(const google::protobuf::RepeatedPtrField<fxfuse::ir::v1::Guard>& guards,
                                   const std::string& context);

}  // namespace fxfuse::ir
