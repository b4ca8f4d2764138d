// CUDA rasterizer: per-tile triangle lists, so that a few screen-filling triangles and millions of tiny ones
// both spread evenly over the GPU. Nothing waits for the GPU on the host (so that calls queue up and a CUDA graph
// can capture them): every size the host needs is known before the kernels run.
//   1. setup:  one thread per (image, triangle) item -> TriSetup and the number of tiles its bounding box spans
//   2. scan:   inclusive sum of those counts -> each item's slice of the (item, tile) pairs
//   3. count:  grid-stride over the pairs (their number is read on the device) -> triangles per tile
//   4. scan:   exclusive sum over tiles -> where each tile's list starts
//   5. fill:   the same pairs again -> each tile's list, in any order (the depth test below is order-free)
//   6. shade:  one block per tile, one thread per pixel, the tile's list staged through shared memory.
// The lists get a capacity chosen on the host before their length is known: enough for the usual scene, more
// where an earlier call needed more (a per-device hint that the GPU writes back to pinned memory). A tile whose
// list did not fit is shaded by testing every triangle of its image instead: slower, same result.
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "cuda_helpers.cuh"
#include "kernel_entry.h"
#include "rasterize.h"

namespace prerast {

namespace {

using Count = unsigned long long;  // atomicAdd's 64-bit type

// Range mode's item bookkeeping travels as a kernel argument (under the 4 KB limit), not as a host-to-device copy.
struct RangeTable {
  int64_t item_start[kRangeImagesPerCall + 1];
  int32_t first[kRangeImagesPerCall];
};
static_assert(sizeof(RangeTable) < 3584, "kernel arguments are limited to 4 KB");

__global__ void range_table_kernel(RangeTable t, int32_t n, int64_t* item_start, int32_t* first) {
  for (int i = threadIdx.x; i <= n; i += blockDim.x) {
    item_start[i] = t.item_start[i];
    if (i < n) first[i] = t.first[i];
  }
}

__global__ void setup_kernel(RasterArgs a, ItemMap m, TriSetup* setups, int32_t* image, int64_t* count) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= m.num_items) return;
  int32_t n;
  TriSetup s;
  item_setup(a, m, i, n, s);
  setups[i] = s;
  image[i] = n;
  count[i] = s.x0 > s.x1 ? 0 : (int64_t)(s.x1 / kTile - s.x0 / kTile + 1) * (s.y1 / kTile - s.y0 / kTile + 1);
}

struct Pairs {
  const TriSetup* setups;
  const int32_t* image;
  const int64_t* pair_end;  // inclusive sum of the items' bounding-box tile counts
  int64_t num_items;
  int tiles_x, tiles_y, W, H;
};

// The p-th (item, tile) pair: its item and tile, and whether the triangle may cover a pixel centre of that tile.
__device__ bool pair_at(const Pairs& g, int64_t p, int32_t& item, uint32_t& key) {
  int64_t lo = 0, hi = g.num_items - 1;  // first item whose end > p
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (g.pair_end[mid] > p)
      hi = mid;
    else
      lo = mid + 1;
  }
  const TriSetup& s = g.setups[lo];
  const int64_t k = p - (lo > 0 ? g.pair_end[lo - 1] : 0);
  const int bw = s.x1 / kTile - s.x0 / kTile + 1;
  const int tx = s.x0 / kTile + (int)(k % bw), ty = s.y0 / kTile + (int)(k / bw);
  float cx0, cy0, cx1, cy1;
  tile_centres(tx, ty, g.W, g.H, cx0, cy0, cx1, cy1);
  item = (int32_t)lo;
  key = (uint32_t)(((int64_t)g.image[lo] * g.tiles_y + ty) * g.tiles_x + tx);
  return rect_may_cover(s, cx0, cy0, cx1, cy1);
}

__global__ void count_kernel(Pairs g, Count* tile_count) {
  const int64_t total = g.pair_end[g.num_items - 1];
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < total; p += (int64_t)gridDim.x * blockDim.x) {
    int32_t item;
    uint32_t key;
    if (pair_at(g, p, item, key)) atomicAdd(tile_count + key, (Count)1);
  }
}

__global__ void fill_kernel(Pairs g, Count* cursor, Count capacity, int32_t* list) {
  const int64_t total = g.pair_end[g.num_items - 1];
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < total; p += (int64_t)gridDim.x * blockDim.x) {
    int32_t item;
    uint32_t key;
    if (!pair_at(g, p, item, key)) continue;
    const Count slot = atomicAdd(cursor + key, (Count)1);
    if (slot < capacity) list[slot] = item;
  }
}

// Writes the list length this call needed into the per-device hint, if larger than what it holds.
__global__ void hint_kernel(const Count* tile_start, const Count* tile_count, int64_t last, int64_t* hint) {
  const int64_t needed = (int64_t)(tile_start[last] + tile_count[last]);
  if (needed > *(volatile int64_t*)hint) *(volatile int64_t*)hint = needed;
}

// One pixel's running nearest fragment; its barycentrics are computed once, for the winner.
struct Nearest {
  float z = 0.0f;
  int32_t id = 0, item = -1;
};

__device__ void shade_staged(const TriSetup* cache, const int32_t* cache_item, int cnt, int x, int y, float px,
                             float py, const float* prev, Nearest& best) {
  for (int j = 0; j < cnt; ++j) {
    const TriSetup& s = cache[j];
    if (x < s.x0 || x > s.x1 || y < s.y0 || y > s.y1) continue;
    float zw;
    if (!frag_eval(s, px, py, zw)) continue;
    const int32_t id1 = s.tri + 1;
    if (prev && !behind_prev(prev, zw, id1)) continue;
    if (best.id != 0 && !key_less(zw, id1, best.z, best.id)) continue;
    best.z = zw, best.id = id1, best.item = cache_item[j];
  }
}

__global__ void __launch_bounds__(kTile* kTile)
    shade_kernel(RasterArgs a, ItemMap m, const TriSetup* setups, const int32_t* list, const Count* tile_start,
                 const Count* tile_count, Count capacity, int tiles_x, int tiles_y) {
  __shared__ TriSetup cache[kTile * kTile];
  __shared__ int32_t cache_item[kTile * kTile];
  __shared__ int staged;
  const int W = a.width, H = a.height;
  const int64_t tile = blockIdx.x;
  const int64_t per_image = (int64_t)tiles_x * tiles_y;
  const int64_t n = tile / per_image;
  const int ty = (int)((tile % per_image) / tiles_x), tx = (int)(tile % tiles_x);
  const int lt = threadIdx.y * kTile + threadIdx.x;
  const int x = tx * kTile + threadIdx.x, y = ty * kTile + threadIdx.y;
  const bool in = x < W && y < H;
  const float px = pixel_center_ndc(x, W), py = pixel_center_ndc(y, H);
  const int64_t o = ((n * H + y) * W + x) * 4;
  const float* prev = a.peel_prev && in ? a.peel_prev + o : nullptr;

  Nearest best;
  const Count s0 = tile_start[tile], s1 = s0 + tile_count[tile];
  if (s1 <= capacity || s0 == s1) {  // an empty tile past the capacity has nothing to shade either
    for (Count base = s0; base < s1; base += kTile * kTile) {
      const int cnt = (int)(s1 - base < (Count)(kTile * kTile) ? s1 - base : kTile * kTile);
      __syncthreads();
      if (lt < cnt) {
        const int32_t item = list[base + lt];
        cache[lt] = setups[item];
        cache_item[lt] = item;
      }
      __syncthreads();
      if (in) shade_staged(cache, cache_item, cnt, x, y, px, py, prev, best);
    }
  } else {
    // The list did not fit its capacity: stage every item of this image that may cover the tile.
    const int64_t lo = m.item_start ? m.item_start[n] : n * m.num_triangles;
    const int64_t hi = m.item_start ? m.item_start[n + 1] : lo + m.num_triangles;
    const int tx0 = tx * kTile, ty0 = ty * kTile;
    const int tx1 = min(tx0 + kTile - 1, W - 1), ty1 = min(ty0 + kTile - 1, H - 1);
    float cx0, cy0, cx1, cy1;
    tile_centres(tx, ty, W, H, cx0, cy0, cx1, cy1);
    for (int64_t base = lo; base < hi; base += kTile * kTile) {
      __syncthreads();
      if (lt == 0) staged = 0;
      __syncthreads();
      const int64_t item = base + lt;
      if (item < hi) {
        const TriSetup& s = setups[item];
        if (s.x0 <= s.x1 && s.x0 <= tx1 && s.x1 >= tx0 && s.y0 <= ty1 && s.y1 >= ty0 &&
            rect_may_cover(s, cx0, cy0, cx1, cy1)) {
          const int k = atomicAdd(&staged, 1);
          cache[k] = s;
          cache_item[k] = (int32_t)item;
        }
      }
      __syncthreads();
      if (in) shade_staged(cache, cache_item, staged, x, y, px, py, prev, best);
    }
  }
  if (!in) return;
  float uv[2] = {0.f, 0.f}, db[4] = {0.f, 0.f, 0.f, 0.f};
  if (best.id) frag_attrs(setups[best.item], px, py, W, H, uv, a.rast_db ? db : nullptr);
  float4 r = best.id ? make_float4(uv[0], uv[1], best.z, encode_triangle_id(best.id)) : make_float4(0.f, 0.f, 0.f, 0.f);
  *reinterpret_cast<float4*>(a.rast + o) = r;
  if (a.rast_db) *reinterpret_cast<float4*>(a.rast_db + o) = make_float4(db[0], db[1], db[2], db[3]);
}

__global__ void backward_kernel(RasterGradArgs a, int64_t pixels, WideSum sum) {
  int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (p >= pixels) return;
  GradTriCache cache;
  pixel_backward(a, p, [&sum](int64_t i, float v) { sum.add(i, v); }, cache);
}

constexpr int kMaxDevices = 64;

// Per device: how long the longest tile lists of any call were, in pinned memory that the GPU writes (hint_kernel)
// and the host reads without waiting, to size the next call's lists. Null where pinned memory is unavailable.
struct Hint {
  int64_t* host = nullptr;
  int64_t* device = nullptr;
};

Hint pair_hint(int device, cudaStream_t stream) {
  static std::mutex mutex;
  static Hint hints[kMaxDevices];
  static bool tried[kMaxDevices] = {};
  if (device < 0 || device >= kMaxDevices) return {};
  std::lock_guard<std::mutex> lock(mutex);
  if (!tried[device]) {
    // Allocating pinned memory is not allowed while a CUDA graph is being captured: try again at a later call.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
      cudaGetLastError();  // not an error of the op's
      return {};
    }
    tried[device] = true;
    void* p = nullptr;
    if (cudaHostAlloc(&p, sizeof(int64_t), cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess) {
      *(volatile int64_t*)p = 0;
      void* d = nullptr;
      if (cudaHostGetDevicePointer(&d, p, 0) == cudaSuccess) hints[device] = {(int64_t*)p, (int64_t*)d};
    }
    cudaGetLastError();  // a failure here only costs the hint
  }
  return hints[device];
}

int multiprocessors(int device) {
  static std::atomic<int> count[kMaxDevices] = {};
  if (device < 0 || device >= kMaxDevices) return 80;
  int c = count[device].load();
  if (c == 0) {
    if (cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, device) == cudaSuccess && c > 0)
      count[device].store(c);
    else
      cudaGetLastError();  // a guess below serves
  }
  return c > 0 ? c : 80;
}

// PRERAST_CUDA_PAIR_CAPACITY fixes the tile lists' capacity (and turns the hint off): a small value sends most
// tiles down the every-triangle path, which is how that path is tested.
int64_t forced_capacity() {
  static const int64_t forced = [] {
    const char* v = std::getenv("PRERAST_CUDA_PAIR_CAPACITY");
    return v && *v ? std::atoll(v) : (int64_t)-1;
  }();
  return forced;
}

// The lists' capacity, before their length is known: never more than every bounding-box pair could need, else
// the larger of a size that fits the usual scene and a quarter more than the longest lists of earlier calls.
int64_t list_capacity(int64_t num_items, int64_t tiles_per_image, int64_t num_tiles, const Hint& hint) {
  constexpr int64_t kMaxCapacity = int64_t(1) << 28;  // 1 GiB of list
  if (forced_capacity() >= 0) return forced_capacity();
  const double worst = (double)num_items * (double)tiles_per_image;
  int64_t c = std::max<int64_t>(int64_t(1) << 22, 8 * num_items + 2 * num_tiles);  // at least 16 MB of list
  if (hint.host) {
    const int64_t seen = *(volatile int64_t*)hint.host;
    c = std::max(c, seen + seen / 4);
  }
  if ((double)c > worst) c = (int64_t)worst;
  return std::min(c, kMaxCapacity);
}

}  // namespace

const char* rasterize_forward_cuda(const RasterArgs& a, StreamHandle stream_handle, const Workspace& ws) {
  cudaStream_t stream = (cudaStream_t)stream_handle;
  const int W = a.width, H = a.height;
  ItemMap m;
  m.num_images = (int32_t)a.num_images;
  m.num_triangles = a.num_triangles;
  if (a.ranges) {
    if (a.num_images > kRangeImagesPerCall) return "range mode: too many images for one call of the CUDA rasterizer";
    RangeTable table;
    m.num_items = build_range_items(a.ranges, a.num_images, table.item_start, table.first);
    auto* item_start = (int64_t*)ws.get((a.num_images + 1) * sizeof(int64_t));
    auto* first = (int32_t*)ws.get(a.num_images * sizeof(int32_t));
    range_table_kernel<<<1, 128, 0, stream>>>(table, (int32_t)a.num_images, item_start, first);
    PR_CUDA_TRY(cudaGetLastError());
    m.item_start = item_start;
    m.first = first;
  } else {
    m.num_items = a.num_images * a.num_triangles;
  }

  const int tiles_x = (W + kTile - 1) / kTile, tiles_y = (H + kTile - 1) / kTile;
  const int64_t num_tiles = a.num_images * tiles_x * tiles_y;
  if (num_tiles == 0) return nullptr;
  auto* tile_count = (Count*)ws.get(num_tiles * sizeof(Count));
  auto* tile_start = (Count*)ws.get(num_tiles * sizeof(Count));
  PR_CUDA_TRY(cudaMemsetAsync(tile_count, 0, num_tiles * sizeof(Count), stream));

  TriSetup* setups = nullptr;
  int32_t* list = nullptr;
  int64_t capacity = 0;
  int device = 0;
  PR_CUDA_TRY(cudaGetDevice(&device));
  const Hint hint = pair_hint(device, stream);
  if (m.num_items > 0) {
    setups = (TriSetup*)ws.get(m.num_items * sizeof(TriSetup));
    auto* image = (int32_t*)ws.get(m.num_items * sizeof(int32_t));
    auto* count = (int64_t*)ws.get(m.num_items * sizeof(int64_t));
    auto* pair_end = (int64_t*)ws.get(m.num_items * sizeof(int64_t));
    setup_kernel<<<grid_for(m.num_items, 256), 256, 0, stream>>>(a, m, setups, image, count);
    PR_CUDA_TRY(cudaGetLastError());
    size_t temp_bytes = 0;
    PR_CUDA_TRY(cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, count, pair_end, m.num_items, stream));
    void* temp = ws.get(temp_bytes);
    PR_CUDA_TRY(cub::DeviceScan::InclusiveSum(temp, temp_bytes, count, pair_end, m.num_items, stream));

    const Pairs pairs{setups, image, pair_end, m.num_items, tiles_x, tiles_y, W, H};
    // The pair count is only known on the device: a grid sized to fill the GPU strides over however many there are.
    const double most_pairs = (double)m.num_items * tiles_x * tiles_y;
    const unsigned grid =
        (unsigned)std::max<double>(1.0, std::min<double>(most_pairs / 256 + 1, 16.0 * multiprocessors(device)));
    count_kernel<<<grid, 256, 0, stream>>>(pairs, tile_count);
    PR_CUDA_TRY(cudaGetLastError());
    temp_bytes = 0;
    PR_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, tile_count, tile_start, (int)num_tiles, stream));
    temp = ws.get(temp_bytes);
    PR_CUDA_TRY(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, tile_count, tile_start, (int)num_tiles, stream));

    capacity = list_capacity(m.num_items, (int64_t)tiles_x * tiles_y, num_tiles, hint);
    if (capacity > 0) {
      list = (int32_t*)ws.get(capacity * sizeof(int32_t));
      auto* cursor = (Count*)ws.get(num_tiles * sizeof(Count));
      PR_CUDA_TRY(cudaMemcpyAsync(cursor, tile_start, num_tiles * sizeof(Count), cudaMemcpyDeviceToDevice, stream));
      fill_kernel<<<grid, 256, 0, stream>>>(pairs, cursor, (Count)capacity, list);
      PR_CUDA_TRY(cudaGetLastError());
    }
    if (hint.device && forced_capacity() < 0) {
      hint_kernel<<<1, 1, 0, stream>>>(tile_start, tile_count, num_tiles - 1, hint.device);
      PR_CUDA_TRY(cudaGetLastError());
    }
  } else {
    PR_CUDA_TRY(cudaMemsetAsync(tile_start, 0, num_tiles * sizeof(Count), stream));
  }
  shade_kernel<<<(unsigned)num_tiles, dim3(kTile, kTile), 0, stream>>>(a, m, setups, list, tile_start, tile_count,
                                                                       (Count)capacity, tiles_x, tiles_y);
  PR_CUDA_TRY(cudaGetLastError());
  return nullptr;
}

const char* rasterize_backward_cuda(const RasterGradArgs& a, StreamHandle stream_handle, const Workspace& ws) {
  cudaStream_t stream = (cudaStream_t)stream_handle;
  const int64_t pixels = a.num_images * a.height * a.width;
  if (pixels == 0) return nullptr;
  WideSum sum;
  const int64_t size = (a.instanced ? a.num_images : 1) * a.num_vertices * 4;
  PR_CUDA_TRY_MSG(wide_sum_begin(sum, a.grad_pos, size, pixels * 4, ws, stream));
  backward_kernel<<<grid_for(pixels, 256), 256, 0, stream>>>(a, pixels, sum);
  PR_CUDA_TRY(cudaGetLastError());
  return wide_sum_finish(sum, stream);
}

}  // namespace prerast

// The entry points of the kernel library (kernel_entry.h).
namespace prerast {

PRERAST_CUDA_ENTRY(rasterize_forward_cuda, RasterArgs, a, k) {
  return rasterize_forward_cuda(a, k.stream, k.workspace);
}
PRERAST_CUDA_ENTRY(rasterize_backward_cuda, RasterGradArgs, a, k) {
  return rasterize_backward_cuda(a, k.stream, k.workspace);
}

}  // namespace prerast
