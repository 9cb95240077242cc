// PagedContextSettled (paged_context.h): which earlier steps could still be writing what a
// paged attention reads ahead.
#include "compiler/runtime/paged_context.h"

#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "compiler/lowering/lowering.h"

namespace fxfuse::runtime {

namespace pb = ::fxfuse::plan::v1;

bool PagedContextSettled(const pb::Plan& plan, int step) {
  if (const char* v = std::getenv("FXFUSE_PAGED_EARLY"); v && v[0] == '0') return false;
  if (step < 0 || step >= plan.steps_size() || !plan.steps(step).has_kernel()) return false;
  const pb::Step& st = plan.steps(step);
  std::map<std::string, int> buffer_of;  // argument name -> buffer
  for (const auto& a : st.kernel().args())
    if (a.v_case() == pb::KernelArg::kTensor) buffer_of[a.name()] = plan.tensors(a.tensor()).buffer();
  std::set<int> metadata, caches;
  for (const char* name : {"block_table", "seq_lens", "query_start_loc"}) {
    auto it = buffer_of.find(name);
    if (it == buffer_of.end() || plan.buffers(it->second).kind() != pb::INPUT) return false;
    metadata.insert(it->second);
  }
  for (const char* name : {"key_cache", "value_cache"}) {
    auto it = buffer_of.find(name);
    if (it == buffer_of.end()) return false;
    caches.insert(it->second);
  }
  for (int i = 0; i < step; ++i) {
    const pb::Step& earlier = plan.steps(i);
    const bool paged = earlier.has_kernel() && (earlier.kernel().kernel() == "rt.reshape_and_cache" ||
                                                earlier.kernel().kernel() == "rt.paged_attention");
    for (int t : lowering::StepTensors(earlier)) {
      const int b = plan.tensors(t).buffer();
      if (metadata.count(b) || (caches.count(b) && !paged)) return false;
    }
  }
  return true;
}

}  // namespace fxfuse::runtime
