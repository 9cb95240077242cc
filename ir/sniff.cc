// Content-based input format detection (see sniff.h). Binary protobuf is told apart by
// walking the top-level fields against the Module and Plan descriptors: a real module has
// length-delimited op_schemas (field 6, a varint in Plan), a real plan has inputs, tensors
// and steps (fields 11..17, unknown to Module).
#include "ir/sniff.h"

#include <cctype>
#include <cstdio>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "ir/importers/fx_text.h"
#include "ir/status.h"
#include "proto/fxfuse_ir.pb.h"
#include "proto/fxfuse_plan.pb.h"

namespace fxfuse::ir {

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

bool startsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Skips whitespace and whole-line comments starting with `comment`.
std::string_view skipComments(std::string_view s, std::string_view comment) {
  for (;;) {
    size_t i = s.find_first_not_of(" \t\r\n");
    if (i == std::string_view::npos) return {};
    s.remove_prefix(i);
    if (!startsWith(s, comment)) return s;
    size_t eol = s.find('\n');
    if (eol == std::string_view::npos) return {};
    s.remove_prefix(eol + 1);
  }
}

bool wireTypeFits(const FieldDescriptor* f, int wire) {
  if (f->is_packable() && f->is_repeated() && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) return true;
  return WireFormatLite::WireTypeForFieldType(static_cast<WireFormatLite::FieldType>(f->type())) == wire;
}

// Every top-level field of `bytes` (as far as the prefix reaches) exists in `d` with a
// matching wire type, and there is at least one field.
bool fitsMessage(std::string_view bytes, const Descriptor* d) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size()));
  int fields = 0;
  // Reading past the end of a prefix is not evidence against the format.
  const bool prefix = bytes.size() >= kSniffBytes;
  while (true) {
    uint32_t tag = in.ReadTag();
    if (tag == 0) return fields > 0 && in.CurrentPosition() == static_cast<int>(bytes.size());
    int number = static_cast<int>(WireFormatLite::GetTagFieldNumber(tag));
    int wire = WireFormatLite::GetTagWireType(tag);
    const FieldDescriptor* f = d->FindFieldByNumber(number);
    if (!f || !wireTypeFits(f, wire)) return false;
    ++fields;
    if (wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t len = 0;
      if (!in.ReadVarint32(&len)) return prefix;
      if (static_cast<size_t>(in.CurrentPosition()) + len > bytes.size()) return prefix;
      if (!in.Skip(static_cast<int>(len))) return prefix;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return prefix;
    }
  }
}

FileFormat sniffJson(std::string_view bytes) {
  if (bytes.find("\"graph_module\"") != std::string_view::npos) return FileFormat::kExportJson;
  if (bytes.find("\"graphs\"") != std::string_view::npos) return FileFormat::kFxfuseJson;
  return FileFormat::kUnknown;
}

// Protobuf text format whose first field is a Plan field ("plan_major: 1").
bool looksLikePlanText(std::string_view bytes) {
  std::string_view s = skipComments(bytes, "#");
  size_t i = 0;
  while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
  if (i == 0) return false;
  std::string_view rest = skipComments(s.substr(i), "#");
  if (rest.empty() || (rest[0] != ':' && rest[0] != '{')) return false;
  return fxfuse::plan::v1::Plan::descriptor()->FindFieldByName(std::string(s.substr(0, i))) != nullptr;
}

}  // namespace

FileFormat sniffFormat(std::string_view bytes) {
  if (startsWith(bytes, "PK\x03\x04") || startsWith(bytes, "PK\x05\x06")) return FileFormat::kZipArchive;
  if (startsWith(bytes, "\x1f\x8b")) return FileFormat::kGzip;
  std::string_view text = skipComments(bytes, "//");
  if (startsWith(text, "{")) return sniffJson(bytes);
  if (startsWith(text, "fxfuse.module")) return FileFormat::kFxg;
  if (looksLikePlanText(bytes)) return FileFormat::kPlanText;
  // FX text, including damaged dumps and torch's str(graph) form: the FX importer names the
  // line that is wrong (or says which dump to take instead).
  if (looksLikeFxText(bytes) || startsWith(text, "graph():") || startsWith(text, "class ") ||
      startsWith(text, "def forward(") || bytes.substr(0, 4096).find("def forward(self") != std::string_view::npos)
    return FileFormat::kFxText;
  const bool module = fitsMessage(bytes, fxfuse::ir::v1::Module::descriptor());
  const bool plan = fitsMessage(bytes, fxfuse::plan::v1::Plan::descriptor());
  if (module) return FileFormat::kModuleBinary;
  if (plan) return FileFormat::kPlanBinary;
  return FileFormat::kUnknown;
}

FileFormat sniffFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot open for reading", path);
  std::string head(kSniffBytes, '\0');
  size_t got = std::fread(head.data(), 1, head.size(), f);
  std::fclose(f);
  head.resize(got);
  return sniffFormat(head);
}

const char* formatName(FileFormat f) {
  switch (f) {
    case FileFormat::kZipArchive: return "torch.export archive (zip)";
    case FileFormat::kGzip: return "gzip";
    case FileFormat::kFxfuseJson: return "fxfuse JSON";
    case FileFormat::kExportJson: return "torch.export JSON";
    case FileFormat::kFxg: return ".fxg text";
    case FileFormat::kFxText: return "FX readable text";
    case FileFormat::kPlanText: return "launch plan text";
    case FileFormat::kPlanBinary: return "launch plan protobuf";
    case FileFormat::kModuleBinary: return "fxfuse protobuf module";
    case FileFormat::kUnknown: break;
  }
  return "unknown";
}

std::string knownFormats() {
  std::string out;
  for (int i = 0; i < static_cast<int>(FileFormat::kUnknown); ++i)
    out += std::string(out.empty() ? "" : ", ") + formatName(static_cast<FileFormat>(i));
  return out;
}

}  // namespace fxfuse::ir
