// rasterize_fwd / rasterize_bwd: validation, allocation and dispatch to the core on CPU or CUDA.
#include "common.h"
#include "../core/rasterize.h"
#include "../core/validate.h"

namespace prerast {
namespace {

constexpr const char* kOp = "rasterize";
constexpr int64_t kMaxResolution = 32768;

struct Geometry {
  int64_t num_images, num_vertices, num_triangles;
  bool instanced;
};

Geometry check_geometry(const Tensor& pos, const Tensor& tri, const OptTensor& ranges) {
  check_tensor(kOp, "pos", pos, Dtype::Float, {2, 3});
  check_tensor(kOp, "tri", tri, Dtype::Int, {2});
  check_dim(kOp, "pos", pos, pos.dim() - 1, 4);
  check_dim(kOp, "tri", tri, 1, 3);
  check_same_device(kOp, "tri", tri, pos, "pos");
  Geometry g;
  g.instanced = pos.dim() == 3;
  g.num_vertices = pos.size(pos.dim() - 2);
  g.num_triangles = tri.size(0);
  PR_CHECK_VALUE(g.num_triangles < kMaxTriangles, kOp, ": ", g.num_triangles, " triangles is more than the ",
                 kMaxTriangles - 1, " whose IDs rast's float32 channel holds; split the mesh over several calls");
  if (g.instanced) {
    PR_CHECK_VALUE(!ranges.has_value(), kOp, ": ranges is only for range mode (pos of shape [V, 4]); got pos ",
                   shape_str(pos));
    g.num_images = pos.size(0);
  } else {
    PR_CHECK_VALUE(ranges.has_value(), kOp, ": pos of shape ", shape_str(pos),
                   " selects range mode, which needs ranges (int32 [N, 2] on the CPU)");
    const Tensor& r = *ranges;
    check_tensor(kOp, "ranges", r, Dtype::Int, {2});
    check_dim(kOp, "ranges", r, 1, 2);
    PR_CHECK_VALUE(r.is_cpu(), kOp, ": ranges must be a CPU tensor, got one on ", facade::device_name(r));
    g.num_images = r.size(0);
    const int32_t* p = data<int32_t>(r);
    for (int64_t n = 0; n < g.num_images; ++n) {
      PR_CHECK_INDEX(p[2 * n] >= 0 && p[2 * n + 1] >= 0 && (int64_t)p[2 * n] + p[2 * n + 1] <= g.num_triangles, kOp,
                     ": ranges[", n, "] = (", p[2 * n], ", ", p[2 * n + 1], ") is outside the ", g.num_triangles,
                     " triangles of tri");
    }
  }
  check_indices(kOp, tri, g.num_vertices);
  return g;
}

// A batch is rasterized in chunks of whole images of at most kItemsPerCall (image, triangle) items each, so that
// the binning's memory (a setup per item, its tile pairs) follows one chunk's work, not the whole batch's: 1000
// images of 10000 triangles at 1x1 pixel need no gigabytes. Range mode also takes at most kRangeImagesPerCall
// images per chunk. Images are independent, so results do not change.
constexpr int64_t kItemsPerCall = int64_t(1) << 21;

struct ImageChunk {
  int64_t first, count;
};

std::vector<ImageChunk> image_chunks(const Geometry& g, const int32_t* ranges) {
  std::vector<ImageChunk> chunks;
  int64_t first = 0, items = 0;
  for (int64_t n = 0; n < g.num_images; ++n) {
    const int64_t here = ranges ? ranges[2 * n + 1] : g.num_triangles;
    if (n > first && (items + here > kItemsPerCall || (ranges && n - first == kRangeImagesPerCall))) {
      chunks.push_back({first, n - first});
      first = n, items = 0;
    }
    items += here;
  }
  chunks.push_back({first, g.num_images - first});
  return chunks;
}

// The core's arguments for images [first, first + count) of the batch described by a.
RasterArgs chunk_args(const RasterArgs& a, const Geometry& g, const ImageChunk& chunk) {
  RasterArgs c = a;
  const int64_t image = (int64_t)a.height * a.width * 4;
  c.num_images = chunk.count;
  if (g.instanced) c.pos = a.pos + chunk.first * g.num_vertices * 4;
  if (a.ranges) c.ranges = a.ranges + 2 * chunk.first;
  if (a.peel_prev) c.peel_prev = a.peel_prev + chunk.first * image;
  c.rast = a.rast + chunk.first * image;
  if (a.rast_db) c.rast_db = a.rast_db + chunk.first * image;
  return c;
}

void check_resolution(int64_t height, int64_t width) {
  PR_CHECK_VALUE(height > 0 && width > 0, kOp, ": resolution must be positive, got (", height, ", ", width, ")");
  PR_CHECK_VALUE(height <= kMaxResolution && width <= kMaxResolution, kOp, ": resolution (", height, ", ", width,
                 ") exceeds the maximum of ", kMaxResolution, " per side");
}

// grad_db (whether rast_db's gradient reaches pos) is for the backward only: an argument of the forward so that
// the autograd registered on this op sees it. output_db=False returns rast_db as [N, H, W, 0] and skips computing
// and writing it: at 4096^2 that is half of the memory the forward writes.
std::tuple<Tensor, Tensor> rasterize_fwd(const Tensor& pos, const Tensor& tri, int64_t height, int64_t width,
                                         const OptTensor& ranges, const OptTensor& peel_prev, bool grad_db,
                                         bool output_db) {
  (void)grad_db;
  check_resolution(height, width);
  Geometry g = check_geometry(pos, tri, ranges);
  const int64_t tiles = g.num_images * ((height + kTile - 1) / kTile) * ((width + kTile - 1) / kTile);
  PR_CHECK_VALUE(tiles < INT32_MAX, kOp, ": ", g.num_images, " images of ", height, "x", width,
                 " are too many pixels for one call; split the batch");
  check_host_memory(kOp, pos, (output_db ? 2 : 1) * bytes_of({g.num_images, height, width, 4}));  // rast, rast_db
  // Every pixel of both is written (background too), so a large one may come from the output cache.
  auto rast = new_output(kOp, pos, {g.num_images, height, width, 4});
  auto rast_db = new_output(kOp, pos, {g.num_images, height, width, output_db ? 4 : 0});
  if (peel_prev.has_value()) {
    check_tensor(kOp, "previous layer", *peel_prev, Dtype::Float, {4});
    check_same_device(kOp, "previous layer", *peel_prev, pos, "pos");
    PR_CHECK_VALUE(sizes(*peel_prev) == sizes(rast), kOp, ": previous layer has shape ", shape_str(*peel_prev),
                   ", expected ", shape_str(rast));
  }
  RasterArgs a;
  a.pos = data<float>(pos);
  a.tri = data<int32_t>(tri);
  a.ranges = g.instanced ? nullptr : data<int32_t>(*ranges);
  a.num_images = g.num_images, a.num_vertices = g.num_vertices, a.num_triangles = g.num_triangles;
  a.height = (int)height, a.width = (int)width;
  a.peel_prev = peel_prev.has_value() ? data<float>(*peel_prev) : nullptr;
  a.rast = data<float>(rast);
  a.rast_db = output_db ? data<float>(rast_db) : nullptr;
  if (rast.numel() == 0) return {rast, rast_db};
  for (const ImageChunk& chunk : image_chunks(g, a.ranges)) {
    const RasterArgs c = chunk_args(a, g, chunk);
    run_on_device(
        kOp, pos, [&] { kernels::cpu("rasterize_forward_cpu", c); },
        [&](StreamHandle stream) {
          // tri is the same for every chunk: checked once, ahead of the first chunk's kernels.
          if (chunk.first == 0)
            if (const char* err = kernels::cuda("check_indices_cuda",
                                                IndexCheckArgs{a.tri, 3 * a.num_triangles, a.num_vertices}, stream))
              return err;
          TensorWorkspace ws{kOp, pos, {}};
          return kernels::cuda("rasterize_forward_cuda", c, stream, ws);
        });
  }
  return {rast, rast_db};
}

Tensor rasterize_bwd(const Tensor& pos, const Tensor& tri, const Tensor& rast, const Tensor& grad_rast,
                     const OptTensor& grad_db) {
  check_tensor(kOp, "pos", pos, Dtype::Float, {2, 3});
  check_tensor(kOp, "tri", tri, Dtype::Int, {2});
  check_dim(kOp, "pos", pos, pos.dim() - 1, 4);
  check_dim(kOp, "tri", tri, 1, 3);
  check_tensor(kOp, "rast", rast, Dtype::Float, {4});
  check_dim(kOp, "rast", rast, 3, 4);
  check_image_sides(kOp, "rast", rast);
  check_tensor(kOp, "grad of rast", grad_rast, Dtype::Float, {4});
  PR_CHECK_VALUE(sizes(grad_rast) == sizes(rast), kOp, ": grad of rast has shape ", shape_str(grad_rast), ", expected ",
                 shape_str(rast));
  for (const Tensor* t : {&tri, &rast, &grad_rast}) check_same_device(kOp, "gradient input", *t, pos, "pos");
  if (grad_db.has_value()) {
    check_tensor(kOp, "grad of rast_db", *grad_db, Dtype::Float, {4});
    check_same_device(kOp, "grad of rast_db", *grad_db, pos, "pos");
    PR_CHECK_VALUE(sizes(*grad_db) == sizes(rast), kOp, ": grad of rast_db has shape ", shape_str(*grad_db),
                   ", expected ", shape_str(rast));
  }
  RasterGradArgs a;
  a.instanced = pos.dim() == 3;
  a.num_images = rast.size(0), a.height = (int)rast.size(1), a.width = (int)rast.size(2);
  a.num_vertices = pos.size(pos.dim() - 2), a.num_triangles = tri.size(0);
  PR_CHECK_VALUE(!a.instanced || pos.size(0) == a.num_images, kOp, ": pos has ", pos.size(0), " images but rast has ",
                 a.num_images);
  // Every read through tri stays inside pos: on the host for CPU tensors, on the device (no sync) for CUDA.
  check_indices(kOp, tri, a.num_vertices);
  auto grad_pos = gradient_like(kOp, pos);
  a.pos = data<float>(pos);
  a.tri = data<int32_t>(tri);
  a.rast = data<float>(rast);
  a.grad_rast = data<float>(grad_rast);
  a.grad_db = grad_db.has_value() ? data<float>(*grad_db) : nullptr;
  a.grad_pos = data<float>(grad_pos);
  run_on_device(
      kOp, pos, [&] { kernels::cpu("rasterize_backward_cpu", a); },
      [&](StreamHandle stream) {
        const char* err =
            kernels::cuda("check_indices_cuda", IndexCheckArgs{a.tri, 3 * a.num_triangles, a.num_vertices}, stream);
        TensorWorkspace ws{kOp, pos, {}};
        return err ? err : kernels::cuda("rasterize_backward_cuda", a, stream, ws);
      });
  return grad_pos;
}

}  // namespace
}  // namespace prerast

#ifndef PRERAST_CUDA_LIBRARY
PRERAST_LIBRARY_FRAGMENT(m) {
  m.def(
      "rasterize_fwd(Tensor pos, Tensor tri, SymInt height, SymInt width, Tensor? ranges, Tensor? peel_prev,"
      " bool grad_db=True, bool output_db=True) -> (Tensor, Tensor)");
  m.def("rasterize_bwd(Tensor pos, Tensor tri, Tensor rast, Tensor grad_rast, Tensor? grad_db) -> Tensor");
}
#endif

PRERAST_KERNELS(m) {
  m.impl("rasterize_fwd", PRERAST_KERNEL(prerast::rasterize_fwd));
  m.impl("rasterize_bwd", PRERAST_KERNEL(prerast::rasterize_bwd));
}
