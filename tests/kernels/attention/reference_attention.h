// CPU reference for the attention tests: one query row against a list of visible keys, with
// float64 accumulation: out = Σ_j softmax_j(scale · q·k_j) v_j. No visible key gives NaN (as the
// kernels). The caller builds the key lists (masking, GQA, paging) from its own layout.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

namespace fxfuse::attention::testing {

inline void AttendRow(const float* q, const std::vector<const float*>& keys, const std::vector<const float*>& values,
                      int head_size, double scale, double* out) {
  const size_t n = keys.size();
  if (n == 0) {
    for (int e = 0; e < head_size; ++e) out[e] = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  std::vector<double> s(n);
  double mx = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < n; ++j) {
    double d = 0;
    for (int e = 0; e < head_size; ++e) d += static_cast<double>(q[e]) * static_cast<double>(keys[j][e]);
    s[j] = d * scale;
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (size_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
  for (int e = 0; e < head_size; ++e) out[e] = 0;
  for (size_t j = 0; j < n; ++j)
    for (int e = 0; e < head_size; ++e) out[e] += s[j] * static_cast<double>(values[j][e]);
  for (int e = 0; e < head_size; ++e) out[e] /= sum;
}

}  // namespace fxfuse::attention::testing
