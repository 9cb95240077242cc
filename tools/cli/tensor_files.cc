// Raw tensor files for `fxfuse run` (--input NAME=FILE, --save-outputs DIR); tensor_files.h.
#include "tools/cli/tensor_files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "tools/interpreter/numerics.h"
#include "tools/interpreter/tensor.h"
#include "ir/io.h"
#include "ir/json_text.h"
#include "ir/status.h"

namespace fxfuse::cli {

namespace {

std::string shapeText(const interp::Shape& shape) {
  std::string s;
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return "[" + s + "]";
}

void makeDirectory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) fail("{}: cannot create the directory ({})", dir, std::strerror(errno));
}

// NAME and FILE of an --input NAME=FILE spec; nullopt when either is empty or '=' is missing.
std::optional<std::pair<std::string, std::string>> splitInputSpec(const std::string& spec) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) return std::nullopt;
  return std::make_pair(spec.substr(0, eq), spec.substr(eq + 1));
}

}  // namespace

std::set<size_t> inputFileIndices(const std::vector<std::string>& specs, const std::vector<std::string>& input_names) {
  std::set<size_t> given;
  for (const auto& spec : specs)
    if (const auto named = splitInputSpec(spec))
      for (size_t i = 0; i < input_names.size(); ++i)
        if (input_names[i] == named->first) given.insert(i);
  return given;
}

void applyInputFiles(const std::vector<std::string>& specs, const std::vector<std::string>& input_names,
                     std::vector<interp::RValue>& inputs) {
  for (const auto& spec : specs) {
    const auto named = splitInputSpec(spec);
    if (!named) fail("--input: expected NAME=FILE, got '{}'", spec);
    const auto& [name, path] = *named;
    size_t i = 0;
    while (i < input_names.size() && input_names[i] != name) ++i;
    if (i == input_names.size() || i >= inputs.size()) {
      std::string known;
      for (const auto& n : input_names) known += (known.empty() ? "" : ", ") + n;
      fail("--input: the graph has no input named '{}' (inputs: {})", name, known);
    }
    if (!inputs[i].isTensor()) fail("--input {}: input '{}' is not a tensor", spec, name);
    const interp::Tensor& seeded = inputs[i].t;
    const int eb = ir::dtypeBytes(seeded.dtype);
    std::string bytes = ir::readFile(path);
    const int64_t n = seeded.numel();
    if (eb <= 0 || static_cast<int64_t>(bytes.size()) != n * eb)
      fail("{}: {} bytes, but input '{}' is {} ({} bytes, little-endian)", path, bytes.size(), name,
           seeded.describe(), n * eb);
    // Float values decoded from their dtype's bits are that dtype's values already: stored as
    // they are (weights are large); integers go through fromValues' range handling.
    const bool floating = ir::isFloating(seeded.dtype) && !ir::isComplex(seeded.dtype);
    interp::Tensor t = floating ? interp::Tensor::uninitialized(seeded.shape, seeded.dtype) : interp::Tensor{};
    std::vector<double> vals(floating ? 0 : static_cast<size_t>(n));
    double* out = floating ? t.base() : vals.data();
    for (int64_t k = 0; k < n; ++k) {
      uint64_t bits = 0;
      std::memcpy(&bits, bytes.data() + k * eb, static_cast<size_t>(eb));  // little-endian low bytes
      out[k] = interp::fromBits(bits, seeded.dtype);
    }
    inputs[i] = interp::RValue::ofTensor(floating ? t : interp::Tensor::fromValues(seeded.shape, seeded.dtype, vals));
  }
}

void saveInputs(const std::string& dir, const std::vector<std::string>& input_names,
                const std::vector<interp::RValue>& inputs) {
  makeDirectory(dir);
  std::string json = "[\n";
  bool first = true;
  for (size_t i = 0; i < inputs.size() && i < input_names.size(); ++i) {
    if (!inputs[i].isTensor()) continue;
    const interp::Tensor& t = inputs[i].t;
    const int eb = ir::dtypeBytes(t.dtype);
    if (eb <= 0 || eb > 8) fail("--save-inputs: input '{}' has dtype {} without a raw form", input_names[i], ir::dtypeName(t.dtype));
    // Row-major order straight from the storage (no copy of the values: weights are large).
    std::string raw(static_cast<size_t>(t.numel()) * static_cast<size_t>(eb), '\0');
    char* at = raw.data();
    const double* storage = t.base();
    interp::stridedLoop<1>(t.shape, {&t.strides}, {t.offset}, [&](const std::array<int64_t, 1>& o) {
      const uint64_t bits = interp::toBits(storage[o[0]], t.dtype);
      std::memcpy(at, &bits, static_cast<size_t>(eb));  // little-endian low bytes
      at += eb;
    });
    const std::string file = fmt::format("input_{}.bin", i);
    ir::writeFileAtomic(dir + "/" + file, raw);
    json += fmt::format("{} {{\"index\": {}, \"name\": {}, \"dtype\": {}, \"shape\": {}, \"file\": \"{}\"}}",
                        first ? "" : ",\n", i, ir::jsonString(input_names[i]), ir::jsonString(std::string(ir::dtypeName(t.dtype))),
                        shapeText(t.shape), file);
    first = false;
  }
  ir::writeFileAtomic(dir + "/inputs.json", json + "\n]\n");
}

void saveOutputs(const std::string& dir, const std::vector<SavedOutput>& outputs) {
  makeDirectory(dir);
  std::string json = "[\n";
  bool first = true;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const interp::Tensor* t = outputs[i].tensor;
    if (!t) continue;
    std::vector<double> vals = t->values();
    std::string raw(vals.size() * 4, '\0');
    for (size_t k = 0; k < vals.size(); ++k) {
      float f = static_cast<float>(vals[k]);
      std::memcpy(raw.data() + k * 4, &f, 4);  // hosts are little-endian (x86-64, aarch64)
    }
    std::string file = fmt::format("output_{}.f32", i);
    ir::writeFileAtomic(dir + "/" + file, raw);
    json += fmt::format("{} {{\"index\": {}, \"name\": {}, \"dtype\": {}, \"shape\": {}, \"file\": \"{}\", "
                        "\"saved_as\": \"float32\"}}",
                        first ? "" : ",\n", i, ir::jsonString(outputs[i].name), ir::jsonString(std::string(ir::dtypeName(t->dtype))),
                        shapeText(t->shape), file);
    first = false;
  }
  ir::writeFileAtomic(dir + "/outputs.json", json + "\n]\n");
}

}  // namespace fxfuse::cli
