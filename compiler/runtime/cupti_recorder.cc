#include "compiler/runtime/cupti_recorder.h"

#include <cupti.h>

#include <cstdlib>
#include <mutex>
#include <utility>

#include "compiler/runtime/cuda_libs.h"
#include "ir/status.h"

namespace fxfuse::runtime {

namespace {

constexpr size_t kBufferBytes = 8u << 20;  // one activity buffer: ~40k kernel records
constexpr size_t kBufferAlign = 8;         // CUPTI's requirement for activity buffers
constexpr uint32_t kMinCuptiVersion = 130000;  // CUDA 13.0's CUPTI (cupti_version.h numbering)

// CUPTI's buffer callbacks take no user pointer: the live recorder's state is global.
struct RecorderState {
  std::mutex mu;
  bool live = false;
  std::vector<KernelSpan> spans;
  size_t dropped = 0;
  size_t invalid = 0;  // kernel records without a start or ending before it
  std::string error;  // the first failure inside a callback (reported by collect)
};
RecorderState& state() {
  static RecorderState s;
  return s;
}

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cupti().cuptiGetResultString(r, &msg);
  fail("CUPTI: {} failed: {}", what, msg ? msg : "unknown error");
}

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

// The kernel records of a completed buffer, read as CUDA 13's kernel record type. Only its
// leading fields (times, stream, grid, name) are read; newer record versions only append fields, so a
// newer CUPTI's records read correctly too.
void CUPTIAPI bufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t size, size_t valid) {
  RecorderState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  CUpti_Activity* record = nullptr;
  for (;;) {
    CUptiResult r = cupti().cuptiActivityGetNextRecord(buffer, valid, &record);
    if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
    if (r != CUPTI_SUCCESS) {
      if (s.error.empty()) s.error = "reading an activity buffer";
      break;
    }
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    if (k->start == 0 || k->end < k->start) {
      ++s.invalid;
      continue;
    }
    s.spans.push_back({k->name ? k->name : "?", k->start, k->end, k->streamId,
                       {static_cast<uint32_t>(k->gridX), static_cast<uint32_t>(k->gridY), static_cast<uint32_t>(k->gridZ)}});
  }
  size_t dropped = 0;
  if (cupti().cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS) s.dropped += dropped;
  std::free(buffer);
}

}  // namespace

KernelRecorder::KernelRecorder() {
  const CuptiApi& api = cupti();
  uint32_t version = 0;
  check(api.cuptiGetVersion(&version), "cuptiGetVersion");
  if (version < kMinCuptiVersion)
    fail("CUPTI: the library's API version {} is older than CUDA 13's ({}); set FXFUSE_CUDA_LIB_DIR to a newer "
         "CUPTI's folder", version, kMinCuptiVersion);
  {
    RecorderState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.live) fail("CUPTI: a kernel recorder is already live in this process");
    s.live = true;
    s.spans.clear();
    s.dropped = 0;
    s.invalid = 0;
    s.error.clear();
  }
  try {
    check(api.cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted), "registering activity buffers");
    check(api.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling concurrent kernel records");
  } catch (...) {  // no destructor runs for a constructor that throws: release the process's recorder here
    std::lock_guard<std::mutex> lock(state().mu);
    state().live = false;
    throw;
  }
}

KernelRecorder::~KernelRecorder() {
  cupti().cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cupti().cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  RecorderState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.live = false;
  s.spans.clear();
}

uint64_t KernelRecorder::now() const {
  uint64_t t = 0;
  check(cupti().cuptiGetTimestamp(&t), "cuptiGetTimestamp");
  return t;
}

std::vector<KernelSpan> KernelRecorder::collect() {
  check(cupti().cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flushing activity records");
  RecorderState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.error.empty()) fail("CUPTI: {}", s.error);
  if (s.dropped > 0) fail("CUPTI dropped {} kernel records: record fewer replays", s.dropped);
  if (s.invalid > 0) fail("CUPTI gave {} kernel records without valid start and end times", s.invalid);
  return std::exchange(s.spans, {});
}

}  // namespace fxfuse::runtime
