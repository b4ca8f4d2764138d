// Attribute interpolation shared by the CPU loops and the CUDA kernels.
//
// A pixel showing triangle id - 1 with barycentrics (u, v) gets, per attribute, u*A0 + v*A1 + (1-u-v)*A2 of the
// triangle's three vertices; background pixels get zero. Screen-space derivatives of a listed attribute follow
// by the chain rule through rast_db = (du/dX, du/dY, dv/dX, dv/dY):
//   dA/dX = (A0 - A2) du/dX + (A1 - A2) dv/dX,   dA/dY = (A0 - A2) du/dY + (A1 - A2) dv/dY.
// The backward pass is the exact adjoint of these (bi)linear maps: attr gets u, v, 1-u-v times the output
// gradient (plus the derivative terms), rast's (u, v) get sum_a g_a (A0 - A2, A1 - A2), rast_db gets the
// derivative outputs' gradients times (A0 - A2, A1 - A2).
#pragma once

#include "common.h"

namespace prerast {

struct InterpArgs {
  const float* attr = nullptr;     // [V, A] shared by all images, or [N, V, A] one block per image
  const float* rast = nullptr;     // [N, H, W, 4], triangle IDs validated to lie in [0, T]
  const float* rast_db = nullptr;  // [N, H, W, 4], or null when no derivatives are output
  const int32_t* tri = nullptr;    // [T, 3], indices validated to lie in [0, V)
  const int32_t* diff = nullptr;   // [D] attributes whose derivatives are output (on the op's device)
  int64_t num_pixels = 0, pixels_per_image = 0;
  int64_t num_vertices = 0, num_attrs = 0, num_diff = 0, num_triangles = 0;
  bool attr_per_image = false;  // attr holds one [V, A] block per image
  float* out = nullptr;         // [N, H, W, A]
  float* out_da = nullptr;      // [N, H, W, 2D]: (dA/dX, dA/dY) per listed attribute
  // Backward only.
  const float* grad_out = nullptr;  // [N, H, W, A]
  const float* grad_da = nullptr;   // [N, H, W, 2D], or null
  float* grad_attr = nullptr;       // shaped like attr, zero-initialised
  float* grad_rast = nullptr;       // [N, H, W, 4]
  float* grad_db = nullptr;         // [N, H, W, 4], or null
};

// What one pixel needs: where its triangle's three attribute rows start, and its barycentrics.
struct InterpPixel {
  int64_t row[3];
  int64_t key;  // (attribute block, triangle): pixels with equal keys read and write the same rows
  float u, v, w;
};

// False for background (and, defensively, for IDs outside [1, T]).
PR_HD bool interp_pixel(const InterpArgs& a, int64_t pix, InterpPixel& p) {
  const float* r = a.rast + pix * 4;
  const int32_t id = decode_triangle_id(r[3]);
  if (!(id >= 1 && id <= a.num_triangles)) return false;
  const int64_t t = (int64_t)id - 1;
  const int64_t block = a.attr_per_image ? pix / a.pixels_per_image : 0;
  const int32_t* idx = a.tri + t * 3;
  for (int j = 0; j < 3; ++j) p.row[j] = (block * a.num_vertices + idx[j]) * a.num_attrs;
  p.key = block * a.num_triangles + t;
  p.u = r[0], p.v = r[1], p.w = (1.0f - r[0]) - r[1];
  return true;
}

PR_HD float interp_value(const InterpArgs& a, const InterpPixel& p, int64_t c) {
  return (a.attr[p.row[0] + c] * p.u + a.attr[p.row[1] + c] * p.v) + a.attr[p.row[2] + c] * p.w;
}

// (dA/dX, dA/dY) of listed attribute k, given the pixel's rast_db entry db.
PR_HD void interp_deriv(const InterpArgs& a, const InterpPixel& p, const float* db, int64_t k, float& dx, float& dy) {
  const int64_t c = a.diff[k];
  const float d0 = a.attr[p.row[0] + c] - a.attr[p.row[2] + c], d1 = a.attr[p.row[1] + c] - a.attr[p.row[2] + c];
  dx = d0 * db[0] + d1 * db[2];
  dy = d0 * db[1] + d1 * db[3];
}

// Backward of one pixel. add(c, w) receives the gradient w[0..2] of attribute c of the three vertex rows. It is
// called for every attribute and every listed derivative even on background pixels (hit == false, w all zero),
// so that the CUDA kernel's warp-wide reductions see the same sequence of calls on every lane. The pixel's
// rast and rast_db gradients are written when pix >= 0.
template <class Add>
PR_HD void interp_backward_pixel(const InterpArgs& a, int64_t pix, bool hit, const InterpPixel& p, Add add) {
  // Without grad_rast only the attributes' gradient is wanted: their values are not read.
  const bool pixel_grads = a.grad_rast != nullptr;
  float gu = 0.0f, gv = 0.0f, gdb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t c = 0; c < a.num_attrs; ++c) {
    float w[3] = {0.0f, 0.0f, 0.0f};
    if (hit) {
      const float g = a.grad_out[pix * a.num_attrs + c];
      w[0] = g * p.u, w[1] = g * p.v, w[2] = g * p.w;
      if (pixel_grads) {
        const float a2 = a.attr[p.row[2] + c];
        gu += g * (a.attr[p.row[0] + c] - a2);
        gv += g * (a.attr[p.row[1] + c] - a2);
      }
    }
    add(c, w);
  }
  for (int64_t k = 0; k < a.num_diff; ++k) {
    float w[3] = {0.0f, 0.0f, 0.0f};
    if (hit && a.grad_da) {
      const int64_t c = a.diff[k];
      const float* db = a.rast_db + pix * 4;
      const float gx = a.grad_da[pix * 2 * a.num_diff + 2 * k], gy = a.grad_da[pix * 2 * a.num_diff + 2 * k + 1];
      w[0] = gx * db[0] + gy * db[1];
      w[1] = gx * db[2] + gy * db[3];
      w[2] = -(w[0] + w[1]);
      if (pixel_grads) {
        const float a2 = a.attr[p.row[2] + c];
        const float d0 = a.attr[p.row[0] + c] - a2, d1 = a.attr[p.row[1] + c] - a2;
        gdb[0] += gx * d0, gdb[1] += gy * d0, gdb[2] += gx * d1, gdb[3] += gy * d1;
      }
    }
    add(a.diff[k], w);
  }
  if (pix < 0 || !pixel_grads) return;
  float* gr = a.grad_rast + pix * 4;
  gr[0] = gu, gr[1] = gv, gr[2] = 0.0f, gr[3] = 0.0f;
  if (a.grad_db)
    for (int i = 0; i < 4; ++i) a.grad_db[pix * 4 + i] = gdb[i];
}

// Per-chunk gradient buffers of the CPU backward may use at most this much memory beyond grad_attr itself.
constexpr int64_t kMaxChunkBytes = 256ll << 20;

void interpolate_forward_cpu(const InterpArgs& a, const ParallelFor& pfor);
// Accumulates into grad_attr through per-chunk copies summed in a fixed order (at most max_extra_bytes of them), or,
// for a grad_attr too large for copies or far larger than the pixels' work, one band of it per thread.
void interpolate_backward_cpu(const InterpArgs& a, const ParallelFor& pfor, int num_chunks, int64_t max_extra_bytes);

// CUDA entry points return nullptr on success or a message describing the failure.
const char* interpolate_forward_cuda(const InterpArgs& a, StreamHandle stream);
const char* interpolate_backward_cuda(const InterpArgs& a, StreamHandle stream, const Workspace& ws);

}  // namespace prerast
