// CUDA rasterizer: tile binning by sorted (tile, item) pairs, so that a few screen-filling triangles and
// millions of tiny ones both spread evenly over the GPU.
//   1. setup:   one thread per (image, triangle) item -> TriSetup and its bounding-box tile count
//   2. scan:    inclusive sum of the counts -> each item's slice of the pair array
//   3. expand:  one thread per pair -> key = tile (or "none" if the tile misses the triangle), value = item
//   4. sort:    stable radix sort by tile, so each tile's list stays in item order
//   5. ranges:  start/end of each tile's list
//   6. shade:   one block per tile, one thread per pixel, the tile's list staged through shared memory
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "rasterize.h"

namespace prerast {

namespace {

#define PR_CUDA_TRY(expr)                               \
  do {                                                  \
    cudaError_t err_ = (expr);                          \
    if (err_ != cudaSuccess) return cudaGetErrorString(err_); \
  } while (0)

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

__global__ void expand_kernel(const TriSetup* setups, const int32_t* image, const int64_t* pair_end, int64_t num_items,
                              int64_t num_pairs, int tiles_x, int tiles_y, int W, int H, uint32_t no_tile,
                              uint32_t* keys, int32_t* vals) {
  int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (p >= num_pairs) return;
  int64_t lo = 0, hi = num_items - 1;  // first item whose end > p
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (pair_end[mid] > p) hi = mid; else lo = mid + 1;
  }
  const TriSetup& s = setups[lo];
  int64_t k = p - (lo > 0 ? pair_end[lo - 1] : 0);
  int bw = s.x1 / kTile - s.x0 / kTile + 1;
  int tx = s.x0 / kTile + (int)(k % bw), ty = s.y0 / kTile + (int)(k / bw);
  float cx0, cy0, cx1, cy1;
  tile_centres(tx, ty, W, H, cx0, cy0, cx1, cy1);
  keys[p] = rect_may_cover(s, cx0, cy0, cx1, cy1) ? (uint32_t)(((int64_t)image[lo] * tiles_y + ty) * tiles_x + tx)
                                                  : no_tile;
  vals[p] = (int32_t)lo;
}

__global__ void ranges_kernel(const uint32_t* keys, int64_t num_pairs, uint32_t no_tile, int64_t* start, int64_t* end) {
  int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (p >= num_pairs) return;
  uint32_t k = keys[p];
  if (k == no_tile) return;
  if (p == 0 || keys[p - 1] != k) start[k] = p;
  if (p == num_pairs - 1 || keys[p + 1] != k) end[k] = p + 1;
}

__global__ void __launch_bounds__(kTile* kTile) shade_kernel(RasterArgs a, const TriSetup* setups, const int32_t* list,
                                                             const int64_t* start, const int64_t* end, int tiles_x,
                                                             int tiles_y) {
  __shared__ TriSetup cache[kTile * kTile];
  __shared__ int32_t cache_item[kTile * kTile];
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

  float bz = 0.0f, bu = 0.0f, bv = 0.0f;
  int32_t bid = 0, bitem = -1;
  const int64_t s0 = start[tile], s1 = end[tile];
  for (int64_t base = s0; base < s1; base += kTile * kTile) {
    const int cnt = (int)(s1 - base < kTile * kTile ? s1 - base : kTile * kTile);
    __syncthreads();
    if (lt < cnt) {
      int32_t item = list[base + lt];
      cache[lt] = setups[item];
      cache_item[lt] = item;
    }
    __syncthreads();
    if (!in) continue;
    for (int j = 0; j < cnt; ++j) {
      const TriSetup& s = cache[j];
      if (x < s.x0 || x > s.x1 || y < s.y0 || y > s.y1) continue;
      float u, v, zw;
      if (!frag_eval(s, px, py, u, v, zw)) continue;
      const int32_t id1 = s.tri + 1;
      if (prev && !behind_prev(prev, zw, id1)) continue;
      if (bid != 0 && !key_less(zw, id1, bz, bid)) continue;
      bz = zw, bu = u, bv = v, bid = id1, bitem = cache_item[j];
    }
  }
  if (!in) return;
  float4 r = bid ? make_float4(bu, bv, bz, encode_triangle_id(bid)) : make_float4(0.f, 0.f, 0.f, 0.f);
  *reinterpret_cast<float4*>(a.rast + o) = r;
  if (a.rast_db) {
    float db[4] = {0.f, 0.f, 0.f, 0.f};
    if (bid) frag_db(setups[bitem], px, py, W, H, db);
    *reinterpret_cast<float4*>(a.rast_db + o) = make_float4(db[0], db[1], db[2], db[3]);
  }
}

__global__ void backward_kernel(RasterGradArgs a, int64_t pixels) {
  int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (p >= pixels) return;
  float* g = a.grad_pos;
  GradTriCache cache;
  pixel_backward(a, p, [g](int64_t i, float v) { atomicAdd(g + i, v); }, cache);
}

inline unsigned blocks(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

int key_bits(int64_t num_tiles) {
  int bits = 1;
  while (bits < 32 && ((int64_t)1 << bits) < num_tiles) ++bits;
  return bits;
}

}  // namespace

const char* rasterize_forward_cuda(const RasterArgs& a, StreamHandle stream_handle, const Workspace& ws) {
  cudaStream_t stream = (cudaStream_t)stream_handle;
  const int W = a.width, H = a.height;
  ItemMap m;
  m.num_images = (int32_t)a.num_images;
  m.num_triangles = a.num_triangles;
  if (a.ranges) {
    // The range table is tiny and lives on the host; copy its prefix sums to the device.
    int64_t* item_start_h = new int64_t[a.num_images + 1];
    int32_t* first_h = new int32_t[a.num_images];
    m.num_items = build_range_items(a.ranges, a.num_images, item_start_h, first_h);
    auto* item_start = (int64_t*)ws.get((a.num_images + 1) * sizeof(int64_t));
    auto* first = (int32_t*)ws.get(a.num_images * sizeof(int32_t));
    cudaError_t e1 = cudaMemcpyAsync(item_start, item_start_h, (a.num_images + 1) * sizeof(int64_t),
                                     cudaMemcpyHostToDevice, stream);
    cudaError_t e2 = cudaMemcpyAsync(first, first_h, a.num_images * sizeof(int32_t), cudaMemcpyHostToDevice, stream);
    cudaError_t e3 = cudaStreamSynchronize(stream);  // the host buffers are freed next
    delete[] item_start_h;
    delete[] first_h;
    PR_CUDA_TRY(e1);
    PR_CUDA_TRY(e2);
    PR_CUDA_TRY(e3);
    m.item_start = item_start;
    m.first = first;
  } else {
    m.num_items = a.num_images * a.num_triangles;
  }

  const int tiles_x = (W + kTile - 1) / kTile, tiles_y = (H + kTile - 1) / kTile;
  const int64_t num_tiles = a.num_images * tiles_x * tiles_y;
  auto* start = (int64_t*)ws.get(num_tiles * sizeof(int64_t));
  auto* end = (int64_t*)ws.get(num_tiles * sizeof(int64_t));
  PR_CUDA_TRY(cudaMemsetAsync(start, 0, num_tiles * sizeof(int64_t), stream));
  PR_CUDA_TRY(cudaMemsetAsync(end, 0, num_tiles * sizeof(int64_t), stream));

  TriSetup* setups = nullptr;
  int32_t* vals = nullptr;
  int64_t num_pairs = 0;
  if (m.num_items > 0) {
    setups = (TriSetup*)ws.get(m.num_items * sizeof(TriSetup));
    auto* image = (int32_t*)ws.get(m.num_items * sizeof(int32_t));
    auto* count = (int64_t*)ws.get(m.num_items * sizeof(int64_t));
    auto* pair_end = (int64_t*)ws.get(m.num_items * sizeof(int64_t));
    setup_kernel<<<blocks(m.num_items, 256), 256, 0, stream>>>(a, m, setups, image, count);
    PR_CUDA_TRY(cudaGetLastError());

    size_t temp_bytes = 0;
    PR_CUDA_TRY(cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, count, pair_end, m.num_items, stream));
    void* temp = ws.get(temp_bytes);
    PR_CUDA_TRY(cub::DeviceScan::InclusiveSum(temp, temp_bytes, count, pair_end, m.num_items, stream));
    PR_CUDA_TRY(cudaMemcpyAsync(&num_pairs, pair_end + m.num_items - 1, sizeof(int64_t), cudaMemcpyDeviceToHost,
                                stream));
    PR_CUDA_TRY(cudaStreamSynchronize(stream));

    if (num_pairs > 0) {
      if (num_pairs > INT32_MAX) return "too many (tile, triangle) overlaps for one call: split the batch";
      auto* keys = (uint32_t*)ws.get(num_pairs * sizeof(uint32_t));
      auto* keys_sorted = (uint32_t*)ws.get(num_pairs * sizeof(uint32_t));
      auto* vals_in = (int32_t*)ws.get(num_pairs * sizeof(int32_t));
      vals = (int32_t*)ws.get(num_pairs * sizeof(int32_t));
      expand_kernel<<<blocks(num_pairs, 256), 256, 0, stream>>>(setups, image, pair_end, m.num_items, num_pairs,
                                                               tiles_x, tiles_y, W, H, (uint32_t)num_tiles, keys,
                                                               vals_in);
      PR_CUDA_TRY(cudaGetLastError());
      // Keys run up to num_tiles ("no tile", which sorts last): sort only the bits that can differ.
      const int bits = key_bits(num_tiles + 1);
      temp_bytes = 0;
      PR_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_sorted, vals_in, vals,
                                                  (int)num_pairs, 0, bits, stream));
      temp = ws.get(temp_bytes);
      PR_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys_sorted, vals_in, vals, (int)num_pairs,
                                                  0, bits, stream));
      ranges_kernel<<<blocks(num_pairs, 256), 256, 0, stream>>>(keys_sorted, num_pairs, (uint32_t)num_tiles, start,
                                                               end);
      PR_CUDA_TRY(cudaGetLastError());
    }
  }
  if (num_tiles > 0) {
    shade_kernel<<<(unsigned)num_tiles, dim3(kTile, kTile), 0, stream>>>(a, setups, vals, start, end, tiles_x,
                                                                       tiles_y);
    PR_CUDA_TRY(cudaGetLastError());
  }
  return nullptr;
}

const char* rasterize_backward_cuda(const RasterGradArgs& a, StreamHandle stream_handle) {
  const int64_t pixels = a.num_images * a.height * a.width;
  if (pixels == 0) return nullptr;
  backward_kernel<<<blocks(pixels, 256), 256, 0, (cudaStream_t)stream_handle>>>(a, pixels);
  PR_CUDA_TRY(cudaGetLastError());
  return nullptr;
}

}  // namespace prerast
