// Layout of one rank's all-reduce workspace (private to kernels/allreduce; plain C++, shared by
// the host code and the kernels). Every region is in 16-bit elements and 16-byte aligned:
//
//   [control 256 B] epoch (launch counter), arrived (CTAs of the current launch that finished)
//   [one-shot  2 x ws x one_shot_elems]  slot, source rank: peers push their whole input here
//   [scatter   2 x ws x scatter_elems]   slot, source rank: peers push the rows this rank owns
//   [gather    2 x gather_elems]         slot: owners push the rounded sums a of their rows
//
// Two slots, alternated by the epoch (see docs/allreduce.md for why two suffice). Every data
// element is the sentinel 0xFFFF while no call is using it: the kernels restore it right after
// reading a value.
#ifndef FXFUSE_KERNELS_ALLREDUCE_WORKSPACE_LAYOUT_H_
#define FXFUSE_KERNELS_ALLREDUCE_WORKSPACE_LAYOUT_H_

#include <algorithm>
#include <cstdint>

#ifdef __CUDACC__
#define FXFUSE_ALLREDUCE_HOST_DEVICE __host__ __device__
#else
#define FXFUSE_ALLREDUCE_HOST_DEVICE
#endif

namespace fxfuse::kernels::allreduce {

// A 16-bit lane holding this value has not been written by its producer yet. It is a NaN in
// bf16 and fp16; producers replace it by 0x7FFF (another NaN, so no sum changes).
inline constexpr uint16_t kSentinel16 = 0xFFFF;
inline constexpr uint16_t kSentinelReplacement16 = 0x7FFF;
inline constexpr int kSlots = 2;
inline constexpr int64_t kControlBytes = 256;
// The one-shot region holds messages (T * H * 2 bytes) up to this size; larger calls take the
// two-shot path. 4 MiB is above every one-shot threshold of the table (thresholds.cc).
inline constexpr int64_t kOneShotCapacityBytes = int64_t{4} << 20;
// Largest H of the fused kernels (512 threads x 8 vectors x 8 elements, as the row kernels).
inline constexpr int64_t kMaxFusedHidden = 32768;

// Device-side control block at offset 0.
struct Control {
  uint32_t epoch;    // launches completed by this rank (slot = epoch % kSlots)
  uint32_t arrived;  // CTAs of the running launch that are done (the last one bumps epoch)
};

inline int64_t RoundUp8(int64_t n) { return (n + 7) / 8 * 8; }

struct WorkspaceLayout {
  int world_size = 1;
  int64_t one_shot_elems = 0;  // per slot and source rank
  int64_t scatter_elems = 0;   // per slot and source rank
  int64_t gather_elems = 0;    // per slot
  int64_t one_shot_offset = 0;  // bytes
  int64_t scatter_offset = 0;
  int64_t gather_offset = 0;
  int64_t total_bytes = 0;

  static WorkspaceLayout For(int world_size, int64_t max_tokens, int64_t hidden_size) {
    WorkspaceLayout l;
    l.world_size = world_size;
    max_tokens = std::max<int64_t>(max_tokens, 0);
    hidden_size = std::max<int64_t>(hidden_size, 1);
    if (world_size > 1) {
      const int64_t one_shot_rows =
          std::min(max_tokens, std::max<int64_t>(1, kOneShotCapacityBytes / (2 * hidden_size)));
      l.one_shot_elems = RoundUp8(one_shot_rows * hidden_size);
      l.scatter_elems = RoundUp8((max_tokens + world_size - 1) / world_size * hidden_size);
      l.gather_elems = RoundUp8(max_tokens * hidden_size);
    }
    l.one_shot_offset = kControlBytes;
    l.scatter_offset = l.one_shot_offset + 2 * kSlots * world_size * l.one_shot_elems;
    l.gather_offset = l.scatter_offset + 2 * kSlots * world_size * l.scatter_elems;
    l.total_bytes = l.gather_offset + 2 * kSlots * l.gather_elems;
    return l;
  }
  // Whether a call of T rows of H elements fits each path.
  bool FitsOneShot(int64_t t, int64_t h) const { return t * h <= one_shot_elems; }
  bool FitsTwoShot(int64_t t, int64_t h) const {
    return (t + world_size - 1) / world_size * h <= scatter_elems && t * h <= gather_elems;
  }
};

// Two-shot: rank `o` owns rows [RowBegin(o), RowBegin(o + 1)) of T.
FXFUSE_ALLREDUCE_HOST_DEVICE inline int64_t OwnedRowBegin(int64_t num_tokens, int world_size, int owner) {
  return num_tokens * owner / world_size;
}

// The rank whose range [OwnedRowBegin(o), OwnedRowBegin(o + 1)) holds `row` (< num_tokens).
FXFUSE_ALLREDUCE_HOST_DEVICE inline int RowOwner(int64_t num_tokens, int world_size, int64_t row) {
  int owner = static_cast<int>(row * world_size / num_tokens);  // a guess, corrected below
  while (owner + 1 < world_size && OwnedRowBegin(num_tokens, world_size, owner + 1) <= row) ++owner;
  while (owner > 0 && OwnedRowBegin(num_tokens, world_size, owner) > row) --owner;
  return owner;
}

}  // namespace fxfuse::kernels::allreduce

#endif  // FXFUSE_KERNELS_ALLREDUCE_WORKSPACE_LAYOUT_H_
