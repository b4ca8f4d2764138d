// Texture sampling math shared by the CPU loops and the CUDA kernels: 2D and cube-map lookups, nearest and
// bilinear filtering, mip level selection and blending, and the exact adjoint of all of it.
//
// Conventions (see also package/prerast/_texture.py):
// - Texel i of an axis of `size` texels covers [i/size, (i+1)/size); its centre is (i + 0.5)/size. A level is
//   stored [tex_batch, (6 faces,) height, width, channels]; u runs along the width, v along the height.
// - Mip level k+1 halves each side of level k (rounding down, never below 1). Texel i of the smaller level is
//   the box average of texels 2i and 2i+1; when the larger side is odd, its last texel is folded into the last
//   average (three texels). A side of 1 stays 1.
// - Level of detail: with the footprint in level-0 texels, jX = d(x, y)/dX and jY = d(x, y)/dY, and A = |jX|^2,
//   B = |jY|^2, C = jX.jY, the level is 0.5 * log2 of the larger eigenvalue of [[A, C], [C, B]] (the squared
//   major axis of the footprint ellipse), plus the bias, clamped to [0, levels - 1]. 'linear-mipmap-nearest'
//   reads level floor(lod); 'linear-mipmap-linear' blends level floor(lod) with the next by the fraction.
// - Cube maps follow the OpenGL face layout: the direction's largest-magnitude component picks the face
//   (+x, -x, +y, -y, +z, -z = faces 0..5; on a tie x beats y beats z), and the face coordinates are
//     +x: s = -z/|x|, t = -y/|x|    -x: s = +z/|x|, t = -y/|x|
//     +y: s = +x/|y|, t = +z/|y|    -y: s = +x/|y|, t = -z/|y|
//     +z: s = +x/|z|, t = -y/|z|    -z: s = -x/|z|, t = -y/|z|
//   mapped from [-1, 1] to [0, 1]; s runs along the width, t along the height. A bilinear tap that falls off a
//   face reads the edge texel of the neighbouring face that it lands on; a tap off a corner, where three faces
//   meet and no texel exists, reads the mean of the three texels around that cube corner. Both neighbours see
//   the same values along their shared edge, so filtering is continuous across faces. A direction's length
//   does not matter: it is first scaled by the power of two that brings its largest |component| into [1, 2)
//   (exact), and so are its derivatives; gradients to both get that factor back.
#pragma once

#include "common.h"

namespace prerast {

// Texels per side of level 0. Texel offsets are int64 throughout, so the total size is limited only by memory;
// the side stays small enough that texel coordinates (u * size) keep sub-texel precision in float32.
constexpr int64_t kMaxTextureSide = 65536;
constexpr int kMaxMipLevels = 17;  // level 0 plus up to 16 halvings: enough for kMaxTextureSide

enum TexFilter : int { kFilterNearest = 0, kFilterLinear = 1, kFilterMipNearest = 2, kFilterMipLinear = 3 };
enum TexBoundary : int { kBoundaryWrap = 0, kBoundaryClamp = 1, kBoundaryZero = 2, kBoundaryCube = 3 };

struct TexLevel {
  const float* data = nullptr;  // [tex_batch, faces, height, width, channels]
  int height = 0, width = 0;
};

struct TextureArgs {
  TexLevel levels[kMaxMipLevels];
  int num_levels = 1;
  int64_t tex_batch = 1;  // 1: one texture for every image
  int channels = 0;
  bool cube = false;
  int filter = kFilterLinear, boundary = kBoundaryWrap;
  int64_t num_pixels = 0;        // N * H * W of the output
  int64_t pixels_per_image = 0;  // H * W
  const float* uv = nullptr;     // [N, H, W, 2] (2D) or [N, H, W, 3] (cube direction)
  const float* uv_da = nullptr;  // [N, H, W, 4] or [N, H, W, 6], or null
  const float* bias = nullptr;   // [N, H, W] or null
  float* out = nullptr;          // [N, H, W, C]
};

struct TextureGradArgs {
  TextureArgs a;
  const float* grad_out = nullptr;  // [N, H, W, C]
  // Shaped like the levels, zero-initialised. Both paths need them back to back in one buffer, in order: they add
  // at grad_levels[0] + a texel's index over all levels.
  float* grad_levels[kMaxMipLevels] = {};
  float* grad_uv = nullptr;     // shaped like uv, zero-initialised; null: not wanted
  float* grad_uv_da = nullptr;  // likewise for uv_da
  float* grad_bias = nullptr;   // likewise for bias
};

PR_HD int iabs(int x) { return x < 0 ? -x : x; }
PR_HD int mip_size(int size) { return size > 1 ? size / 2 : 1; }
PR_HD int tex_faces(const TextureArgs& a) { return a.cube ? 6 : 1; }
PR_HD int uv_dims(const TextureArgs& a) { return a.cube ? 3 : 2; }

// --- mip construction -------------------------------------------------------------------------------------

// Texels [begin, begin + count) of an axis of `src` texels that make up texel i of the next level.
PR_HD void mip_span(int src, int i, int& begin, int& count) {
  if (src == 1) {
    begin = 0, count = 1;
    return;
  }
  begin = 2 * i;
  count = (i == src / 2 - 1 && (src & 1)) ? 3 : 2;
}

// Texel (b, y, x) of the level below `src` ([B, sh, sw, C]) into dst ([B, mip_size(sh), mip_size(sw), C]).
PR_HD void mip_down_texel(const float* src, int sh, int sw, int C, float* dst, int64_t b, int y, int x) {
  int y0, ny, x0, nx;
  mip_span(sh, y, y0, ny);
  mip_span(sw, x, x0, nx);
  const float scale = 1.0f / (float)(ny * nx);
  float* o = dst + ((b * mip_size(sh) + y) * mip_size(sw) + x) * C;
  for (int c = 0; c < C; ++c) {
    float sum = 0.0f;
    for (int r = 0; r < ny; ++r)
      for (int k = 0; k < nx; ++k) sum += src[((b * sh + y0 + r) * sw + x0 + k) * C + c];
    o[c] = sum * scale;
  }
}

// Adjoint of mip_down_texel for source texels (b, y, x_begin .. x_end - 1), written into grad ([B, sh, sw, C]),
// or added to it where `accumulate`: every source texel feeds exactly one texel of the next level, so it receives
// that texel's gradient times its weight, and every texel of grad is written exactly once (no zeroing first). A
// row segment at a time, so that the CPU finds the parent row and its two weights once per row, not per texel.
PR_HD void mip_down_adjoint_row(const float* grad_next, int sh, int sw, int C, float* grad, int64_t b, int y,
                                int x_begin, int x_end, bool accumulate) {
  const int dh = mip_size(sh), dw = mip_size(sw);
  const int py = sh == 1 ? 0 : (y / 2 < dh - 1 ? y / 2 : dh - 1);
  int y0, ny, x0, nx, x0_last, nx_last;
  mip_span(sh, py, y0, ny);
  mip_span(sw, 0, x0, nx);
  mip_span(sw, dw - 1, x0_last, nx_last);
  const float scale = 1.0f / (float)(ny * nx), scale_last = 1.0f / (float)(ny * nx_last);
  const float* g_row = grad_next + (b * dh + py) * dw * C;
  float* o = grad + ((b * sh + y) * sw + x_begin) * C;
  for (int x = x_begin; x < x_end; ++x, o += C) {
    const int px = sw == 1 ? 0 : (x / 2 < dw - 1 ? x / 2 : dw - 1);
    const float s = px == dw - 1 ? scale_last : scale;
    const float* g = g_row + (int64_t)px * C;
    if (accumulate)
      for (int c = 0; c < C; ++c) o[c] += g[c] * s;
    else
      for (int c = 0; c < C; ++c) o[c] = g[c] * s;
  }
}

// --- cube faces -------------------------------------------------------------------------------------------

// Axis and sign of a face's normal (m), of its s direction and of its t direction (see the table at the top).
struct FaceAxes {
  int m, s, t;
  int sm, ss, st;
};

PR_HD FaceAxes face_axes(int face) {
  switch (face) {
    case 0:
      return {0, 2, 1, 1, -1, -1};
    case 1:
      return {0, 2, 1, -1, 1, -1};
    case 2:
      return {1, 0, 2, 1, 1, 1};
    case 3:
      return {1, 0, 2, -1, 1, -1};
    case 4:
      return {2, 0, 1, 1, 1, -1};
    default:
      return {2, 0, 1, -1, -1, -1};
  }
}

template <class T>
PR_HD int major_axis(T ax, T ay, T az) {
  return (ax >= ay && ax >= az) ? 0 : (ay >= az ? 1 : 2);
}

// A direction seen from its cube face: q = |major component| > 0, a = sc, b = tc (face coordinates times q), of
// the direction scaled by 2^-e so that q is in [1, 2).
struct CubeFrame {
  int face;
  FaceAxes ax;
  float q, a, b;
  int e;
};

PR_HD bool cube_frame(const float* dir, CubeFrame& f) {
  if (!isfinite(dir[0]) || !isfinite(dir[1]) || !isfinite(dir[2])) return false;
  f.e = normalising_exponent(dir, 3);
  const float d[3] = {scale_pow2(dir[0], -f.e), scale_pow2(dir[1], -f.e), scale_pow2(dir[2], -f.e)};
  const int m = major_axis(fabsf(d[0]), fabsf(d[1]), fabsf(d[2]));
  f.face = 2 * m + (d[m] < 0.0f ? 1 : 0);
  f.ax = face_axes(f.face);
  f.q = (float)f.ax.sm * d[m];
  f.a = (float)f.ax.ss * d[f.ax.s];
  f.b = (float)f.ax.st * d[f.ax.t];
  return f.q > 0.0f;
}

// The texel that bilinear tap (ix, iy) of `face` reads when it lies one texel off the face along exactly one
// axis. The tap's centre, extended past the face edge, is P = size*N + (2ix+1-size)*S + (2iy+1-size)*T in
// units of half a texel; its major axis picks the neighbouring face, and projecting P onto that face lands
// inside the edge texel row or column next to the seam. All in integers, so it never depends on rounding.
PR_HD void cube_neighbour(int face, int ix, int iy, int size, int& face2, int& ix2, int& iy2) {
  const FaceAxes f = face_axes(face);
  int P[3] = {0, 0, 0};
  P[f.m] += f.sm * size;
  P[f.s] += f.ss * (2 * ix + 1 - size);
  P[f.t] += f.st * (2 * iy + 1 - size);
  const int m = major_axis(iabs(P[0]), iabs(P[1]), iabs(P[2]));
  face2 = 2 * m + (P[m] < 0 ? 1 : 0);
  const FaceAxes g = face_axes(face2);
  const int q = g.sm * P[g.m];
  const int a = g.ss * P[g.s], b = g.st * P[g.t];
  // (a + q) * size reaches 2 size^2: int64, as sides go up to 65536.
  ix2 = clampi((int)((int64_t)(a + q) * size / (2 * q)), 0, size - 1);
  iy2 = clampi((int)((int64_t)(b + q) * size / (2 * q)), 0, size - 1);
}

// --- taps -------------------------------------------------------------------------------------------------

// Where a pixel samples: (u, v) in [0,1]-texture space (for a cube map, (s, t) on `face`).
struct SampleCoord {
  float u = 0.0f, v = 0.0f;
  int face = 0;
  bool valid = false;
};

// Bilinear fractions of one level lookup: n = 1 (nearest: tap 0 alone) or 4 (taps (x0,y0), (x1,y0), (x0,y1),
// (x1,y1), weighted by fx and fy).
struct TapFrac {
  int n = 0;
  float fx = 0.0f, fy = 0.0f;
};

PR_HD float bilinear_weight(const TapFrac& f, int k) {
  if (f.n == 1) return 1.0f;
  return ((k & 1) ? f.fx : 1.0f - f.fx) * ((k & 2) ? f.fy : 1.0f - f.fy);
}

// floorf(x), bit for bit. On the host without SSE4.1 floorf is a libm call (a few per pixel); below 2^23 the
// truncation, less one where it rounded up, is the floor, and only -0 needs its sign back.
PR_HD float floor_float(float x) {
#if defined(__CUDA_ARCH__)
  return floorf(x);
#else
  if (!(fabsf(x) < 8388608.0f)) return floorf(x);  // NaN, infinities, and floats that are integers already
  const float t = (float)(int)x;
  const float f = t > x ? t - 1.0f : t;
  return f == 0.0f ? (x == 0.0f ? x : 0.0f) : f;
#endif
}

// Index of the texel at integer-valued coordinate i (a floor, or a floor + 1) along an axis of `size` texels under
// a 2D boundary mode; -1 means "outside, reads zero".
PR_HD int boundary_index(float i, int size, int mode) {
  if (i >= 0.0f && i < (float)size) return (int)i;  // inside: every mode reads it, the wrap without a division
  if (mode == kBoundaryWrap) {
    // Within int range the remainder in int is fmodf's, which is exact for integers, without the libm call.
    if (i >= -2147483648.0f && i < 2147483648.0f) {
      const int n = (int)i;
      // One period off (the taps next to the seam, and uv = 0 of empty pixels): no division either.
      if (n >= -size && n < 2 * size) return n < 0 ? n + size : n - size;
      const int k = n % size;
      return k < 0 ? k + size : k;
    }
    float r = fmodf(i, (float)size);
    if (r < 0.0f) r += (float)size;
    const int k = (int)r;
    return k >= size ? k - size : (k < 0 ? 0 : k);
  }
  if (i < 0.0f) return mode == kBoundaryClamp ? 0 : -1;
  if (i >= (float)size) return mode == kBoundaryClamp ? size - 1 : -1;
  return (int)i;
}

PR_HD int64_t texel_offset(const TextureArgs& a, int64_t n_tex, int face, int h, int w, int iy, int ix) {
  return ((((n_tex * tex_faces(a) + face) * h + iy) * w) + ix) * (int64_t)a.channels;
}

// Bilinear tap k at (ix, iy) of a cube face, continued across edges and corners (see the top of this file).
template <class Visit>
PR_HD void visit_cube_tap(const TextureArgs& a, int64_t n_tex, int face, int S, int ix, int iy, int k, Visit& visit) {
  const bool in_x = ix >= 0 && ix < S, in_y = iy >= 0 && iy < S;
  if (in_x && in_y) {
    visit(k, texel_offset(a, n_tex, face, S, S, iy, ix), 1.0f);
    return;
  }
  int f2, x2, y2;
  if (in_x || in_y) {
    cube_neighbour(face, ix, iy, S, f2, x2, y2);
    visit(k, texel_offset(a, n_tex, f2, S, S, y2, x2), 1.0f);
    return;
  }
  // Off a corner: the mean of this face's corner texel and the two neighbours' texels at that cube corner.
  const int cx = clampi(ix, 0, S - 1), cy = clampi(iy, 0, S - 1);
  const float third = 1.0f / 3.0f;
  visit(k, texel_offset(a, n_tex, face, S, S, cy, cx), third);
  cube_neighbour(face, ix, cy, S, f2, x2, y2);
  visit(k, texel_offset(a, n_tex, f2, S, S, y2, x2), third);
  cube_neighbour(face, cx, iy, S, f2, x2, y2);
  visit(k, texel_offset(a, n_tex, f2, S, S, y2, x2), third);
}

// The texels one lookup in `level` at c reads: sets f first, then calls visit(k, offset, share) for each texel
// (offset of its channel 0) with its share of bilinear tap k. Taps outside a 'zero' boundary are not visited.
// A visitor rather than a list of taps keeps everything in registers on the GPU.
template <class Visit>
PR_HD void visit_taps(const TextureArgs& a, int level, int64_t n_tex, const SampleCoord& c, bool nearest, TapFrac& f,
                      Visit& visit) {
  const int h = a.levels[level].height, w = a.levels[level].width;
  const float x = c.u * (float)w, y = c.v * (float)h;
  f.n = nearest ? 1 : 4;
  if (!isfinite(x) || !isfinite(y)) return;  // a coordinate too large for float32 texel space reads nothing
  if (nearest) {
    if (a.cube) {
      const int ix = clampi((int)floor_float(x), 0, w - 1), iy = clampi((int)floor_float(y), 0, h - 1);
      visit(0, texel_offset(a, n_tex, c.face, h, w, iy, ix), 1.0f);
      return;
    }
    const int ix = boundary_index(floor_float(x), w, a.boundary), iy = boundary_index(floor_float(y), h, a.boundary);
    if (ix >= 0 && iy >= 0) visit(0, texel_offset(a, n_tex, 0, h, w, iy, ix), 1.0f);
    return;
  }
  const float xs = x - 0.5f, ys = y - 0.5f;  // cube: in [-0.5, size - 0.5] since s, t are in [0, 1]
  const float x0 = floor_float(xs), y0 = floor_float(ys);
  f.fx = xs - x0, f.fy = ys - y0;
  if (a.cube) {
    const int ix = clampi((int)x0, -1, w - 1), iy = clampi((int)y0, -1, h - 1);
    for (int k = 0; k < 4; ++k) visit_cube_tap(a, n_tex, c.face, w, ix + (k & 1), iy + (k >> 1), k, visit);
    return;
  }
  const int ix[2] = {boundary_index(x0, w, a.boundary), boundary_index(x0 + 1.0f, w, a.boundary)};
  const int iy[2] = {boundary_index(y0, h, a.boundary), boundary_index(y0 + 1.0f, h, a.boundary)};
  for (int k = 0; k < 4; ++k)
    if (ix[k & 1] >= 0 && iy[k >> 1] >= 0) visit(k, texel_offset(a, n_tex, 0, h, w, iy[k >> 1], ix[k & 1]), 1.0f);
}

// --- level of detail ----------------------------------------------------------------------------------------

// Per-pixel setup: where to sample, which levels, and what the backward pass needs to differentiate the LOD.
struct PixelSample {
  SampleCoord c;
  CubeFrame cf;
  int l0 = 0, l1 = 0;  // levels blended as (1 - f) * l0 + f * l1
  float f = 0.0f;
  bool lod_grad = false;  // the LOD is strictly inside [0, levels - 1] and depends smoothly on its inputs
  bool j_grad = false;    // ... and its gradient to the footprint is taken (see footprint_lod_terms)
  float j[2][2] = {};     // footprint in level-0 texels: j[0] = d(x, y)/dX, j[1] = d(x, y)/dY
};

// Larger eigenvalue of [[A, C], [C, B]] for the footprint j (see the top of this file). The spread
// r = sqrt(((A - B) / 2)^2 + C^2) is formed from A - B and C directly, so it is exact when they vanish.
PR_HD float footprint_major(const float j[2][2], float& A, float& B, float& C, float& r) {
  A = j[0][0] * j[0][0] + j[0][1] * j[0][1];
  B = j[1][0] * j[1][0] + j[1][1] * j[1][1];
  C = j[0][0] * j[1][0] + j[0][1] * j[1][1];
  const float h = 0.5f * (A - B);
  r = sqrtf(h * h + C * C);
  return 0.5f * (A + B) + r;
}

// Gradient of footprint_major to j, scaled by g, into gj. Where the footprint is a circle (r = 0) the two
// eigenvalues meet and the function has a kink; it then takes the mean of the one-sided derivatives.
PR_HD void footprint_major_backward(const float j[2][2], float g, float gj[2][2]) {
  float A, B, C, r;
  footprint_major(j, A, B, C, r);
  const float s = r > 0.0f ? 0.5f / r : 0.0f;
  const float dA = 0.5f + s * 0.5f * (A - B), dB = 0.5f - s * 0.5f * (A - B), dC = 2.0f * s * C;
  for (int k = 0; k < 2; ++k) {
    gj[0][k] = g * (2.0f * dA * j[0][k] + dC * j[1][k]);
    gj[1][k] = g * (2.0f * dB * j[1][k] + dC * j[0][k]);
  }
}

// The derivative of the normalised direction's component `axis` along screen axis `screen`, from da.
PR_HD float cube_da(const CubeFrame& f, const float* da, int axis, int screen) {
  return scale_pow2(da[2 * axis + screen], -f.e);
}

// Footprint of a cube lookup: the face coordinates s = (a/q + 1)/2, t = (b/q + 1)/2 differentiated along the
// screen axes, in texels of a face of `size` texels. da holds (dx/dX, dx/dY, dy/dX, dy/dY, dz/dX, dz/dY).
PR_HD void cube_footprint(const CubeFrame& f, const float* da, int size, float j[2][2]) {
  const float k = 0.5f * (float)size / (f.q * f.q);
  for (int axis = 0; axis < 2; ++axis) {
    const float q_d = (float)f.ax.sm * cube_da(f, da, f.ax.m, axis);
    const float a_d = (float)f.ax.ss * cube_da(f, da, f.ax.s, axis);
    const float b_d = (float)f.ax.st * cube_da(f, da, f.ax.t, axis);
    j[axis][0] = k * (a_d * f.q - f.a * q_d);
    j[axis][1] = k * (b_d * f.q - f.b * q_d);
  }
}

// The footprint divided by its largest |entry| k (returned; 0 for a zero footprint). The LOD does not depend on
// the scale apart from log2(k), so working on j / k, where the squares are about 1, neither overflows for
// huge footprints nor underflows for tiny ones.
PR_HD float footprint_normalised(const float j[2][2], float jn[2][2]) {
  float k = 0.0f;
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x) k = fabsf(j[y][x]) > k ? fabsf(j[y][x]) : k;
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x) jn[y][x] = k > 0.0f ? j[y][x] / k : 0.0f;
  return k;
}

// 0.5 * log2 of the footprint's squared major axis: -inf for a zero footprint (whatever the bias, it magnifies:
// level 0), +inf for an infinite one (the last level), NaN for a NaN one (pixel_setup reads level 0).
// `differentiable` says whether the gradient to j is taken: below 2^-64 texels it (about 1/k) is left out, so
// that it stays well inside float range. In two steps, so that the CPU can take the logarithms of many pixels at
// once: footprint_lod_terms returns true with the normalised major axis m and the scale k when the LOD is
// lod_from_terms(m, k), false with the LOD itself in lod when it is one of the values above.
PR_HD bool footprint_lod_terms(const float j[2][2], bool& differentiable, float& lod, float& m, float& k) {
  differentiable = false;
  bool any_nan = false, any_inf = false;
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x) {
      any_nan |= j[y][x] != j[y][x];
      any_inf |= fabsf(j[y][x]) == INFINITY;
    }
  lod = any_nan ? NAN : INFINITY;
  if (any_nan || any_inf) return false;
  float jn[2][2], A, B, C, r;
  k = footprint_normalised(j, jn);
  lod = -INFINITY;
  if (k == 0.0f) return false;
  differentiable = k >= 5.42101086e-20f;  // 2^-64
  m = footprint_major(jn, A, B, C, r);
  return true;
}

PR_HD float lod_from_terms(float log2_m, float log2_k) { return 0.5f * log2_m + log2_k; }

// pixel_setup in two steps, likewise: pixel_setup_start sets where to sample and returns kLodNone when that is all
// (no mip levels, or nothing to sample), kLodReady with the LOD before its bias in lod, or kLodPending when the LOD is
// lod_from_terms(log2(m), log2(k)); pixel_setup_finish then picks the levels.
enum LodState : int { kLodNone = 0, kLodReady = 1, kLodPending = 2 };

PR_HD int pixel_setup_start(const TextureArgs& a, int64_t pix, PixelSample& p, float& lod, float& m, float& k) {
  const float* uv = a.uv + pix * uv_dims(a);
  if (a.cube) {
    if (!cube_frame(uv, p.cf)) return kLodNone;
    p.c.u = 0.5f * (p.cf.a / p.cf.q + 1.0f);
    p.c.v = 0.5f * (p.cf.b / p.cf.q + 1.0f);
    p.c.face = p.cf.face;
  } else {
    p.c.u = uv[0], p.c.v = uv[1];
  }
  p.c.valid = isfinite(p.c.u) && isfinite(p.c.v);
  if (a.filter < kFilterMipNearest || a.num_levels <= 1) return kLodNone;

  lod = 0.0f;
  if (a.uv_da) {
    const float* da = a.uv_da + pix * (a.cube ? 6 : 4);
    if (a.cube) {
      cube_footprint(p.cf, da, a.levels[0].width, p.j);
    } else {
      const float W = (float)a.levels[0].width, H = (float)a.levels[0].height;
      p.j[0][0] = W * da[0], p.j[0][1] = H * da[2];
      p.j[1][0] = W * da[1], p.j[1][1] = H * da[3];
    }
    if (footprint_lod_terms(p.j, p.j_grad, lod, m, k)) return kLodPending;
  }
  return kLodReady;
}

PR_HD void pixel_setup_finish(const TextureArgs& a, int64_t pix, PixelSample& p, float lod) {
  if (a.bias) lod += a.bias[pix];
  if (lod != lod) lod = 0.0f;  // NaN footprint or bias: level 0, no gradient
  const float top = (float)(a.num_levels - 1);
  p.lod_grad = lod > 0.0f && lod < top;
  lod = lod < 0.0f ? 0.0f : (lod > top ? top : lod);
  if (a.filter == kFilterMipNearest) {
    p.l0 = p.l1 = clampi((int)floor_float(lod), 0, a.num_levels - 1);
    p.lod_grad = false;
    return;
  }
  p.l0 = clampi((int)floor_float(lod), 0, a.num_levels - 1);
  p.l1 = p.l0 + 1 < a.num_levels ? p.l0 + 1 : p.l0;
  p.f = p.l1 > p.l0 ? lod - (float)p.l0 : 0.0f;
}

PR_HD PixelSample pixel_setup(const TextureArgs& a, int64_t pix) {
  PixelSample p;
  float lod = 0.0f, m = 0.0f, k = 0.0f;
  const int state = pixel_setup_start(a, pix, p, lod, m, k);
  if (state == kLodNone) return p;
  pixel_setup_finish(a, pix, p, state == kLodPending ? lod_from_terms(log2_float(m), log2_float(k)) : lod);
  return p;
}

// --- per pixel -------------------------------------------------------------------------------------------

PR_HD int64_t tex_image(const TextureArgs& a, int64_t pix) { return a.tex_batch == 1 ? 0 : pix / a.pixels_per_image; }

// Output channels are handled kChannelBlock at a time, accumulated in registers.
constexpr int kChannelBlock = 4;

// One output pixel from its setup p (pixel_setup's). kChannels > 0: the texture has exactly that many channels, at
// most kChannelBlock; the CPU takes that form for the common counts, where the compiler keeps each channel's sum in a
// register of its own (with the count known only at run time, it packed the four sums into integer registers).
template <int kChannels = 0>
PR_HD void texture_forward_sample(const TextureArgs& a, int64_t pix, const PixelSample& p) {
  static_assert(kChannels >= 0 && kChannels <= kChannelBlock, "at most one block of channels");
  const int channels = kChannels ? kChannels : a.channels;
  float* out = a.out + pix * channels;
  const int64_t n_tex = tex_image(a, pix);
  const int sides = p.f > 0.0f ? 2 : 1;
  for (int c0 = 0; c0 < channels; c0 += kChannelBlock) {
    const int nc = kChannels ? kChannels : (channels - c0 < kChannelBlock ? channels - c0 : kChannelBlock);
    float acc[kChannelBlock] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int side = 0; p.c.valid && side < sides; ++side) {
      const int level = side ? p.l1 : p.l0;
      const float wl = side ? p.f : 1.0f - p.f;
      const float* tex = a.levels[level].data + c0;
      TapFrac f;
      auto visit = [&](int k, int64_t off, float share) {
        const float w = wl * share * bilinear_weight(f, k);
        for (int j = 0; j < kChannelBlock; ++j)
          if (j < nc) acc[j] += w * tex[off + j];
      };
      visit_taps(a, level, n_tex, p.c, a.filter == kFilterNearest, f, visit);
    }
    for (int j = 0; j < nc; ++j) out[c0 + j] = acc[j];
  }
}

PR_HD void texture_forward_pixel(const TextureArgs& a, int64_t pix) {
  texture_forward_sample(a, pix, pixel_setup(a, pix));
}

// d(loss)/d(direction) (added to gdir) and d(loss)/d(direction derivatives) (added to gda) of a cube lookup,
// from the gradients of the face coordinates (gs, gt) and of the footprint gj. da null: the lookup used no
// footprint. Either output may be null when not wanted.
PR_HD void cube_backward(const CubeFrame& f, const float* da, int size, float gs, float gt, const float gj[2][2],
                         float* gdir_out, float* gda_out) {
  // Gradients to the normalised direction and derivatives first; the originals are 2^e times those.
  float gdir[3] = {0.0f, 0.0f, 0.0f}, gda_n[6] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  float* gda = gda_out ? gda_n : nullptr;
  const float q = f.q, iq = 1.0f / q, iq2 = iq * iq;
  // s = 0.5 (a/q + 1), t = 0.5 (b/q + 1)
  float ga = 0.5f * gs * iq, gb = 0.5f * gt * iq;
  float gq = -0.5f * (gs * f.a + gt * f.b) * iq2;
  if (da) {
    const float k = 0.5f * (float)size * iq2;
    for (int axis = 0; axis < 2; ++axis) {
      // j[axis] = k * (a_d q - a q_d, b_d q - b q_d) with k = size / (2 q^2)
      const float q_d = (float)f.ax.sm * cube_da(f, da, f.ax.m, axis);
      const float a_d = (float)f.ax.ss * cube_da(f, da, f.ax.s, axis);
      const float b_d = (float)f.ax.st * cube_da(f, da, f.ax.t, axis);
      const float g0 = gj[axis][0], g1 = gj[axis][1];
      ga -= k * q_d * g0;
      gb -= k * q_d * g1;
      // d/dq of k (a_d q - a q_d) = -k a_d + 2 k a q_d / q, and likewise for b
      gq += g0 * k * (2.0f * f.a * q_d * iq - a_d) + g1 * k * (2.0f * f.b * q_d * iq - b_d);
      if (gda) {
        gda[2 * f.ax.s + axis] += (float)f.ax.ss * k * q * g0;
        gda[2 * f.ax.t + axis] += (float)f.ax.st * k * q * g1;
        gda[2 * f.ax.m + axis] -= (float)f.ax.sm * k * (f.a * g0 + f.b * g1);
      }
    }
  }
  gdir[f.ax.s] += (float)f.ax.ss * ga;
  gdir[f.ax.t] += (float)f.ax.st * gb;
  gdir[f.ax.m] += (float)f.ax.sm * gq;
  if (gdir_out)
    for (int i = 0; i < 3; ++i) gdir_out[i] += scale_pow2(gdir[i], -f.e);
  if (gda_out)
    for (int i = 0; i < 6; ++i) gda_out[i] += scale_pow2(gda_n[i], -f.e);
}

// Whether the output gradient of a pixel has a non-zero channel: pixels without one add nothing.
PR_HD bool any_output_gradient(const TextureGradArgs& G, int64_t pix) {
  const float* g = G.grad_out + pix * G.a.channels;
  bool any = false;
  for (int ch = 0; ch < G.a.channels; ++ch) any |= g[ch] != 0.0f;
  return any;
}

// Adds w * g[j] to element i + j of level's gradient for the nc channels j of one texel (g holds kChannelBlock
// floats), through add(level, index, value). A scatter that can take a texel's channels at once declares an add_texel
// of its own for its type (found by argument-dependent lookup; more specialised, it is preferred).
template <class Add>
PR_HD void add_texel(Add& add, int level, int64_t i, float w, const float* g, int nc) {
  for (int j = 0; j < nc; ++j) add(level, i + j, w * g[j]);
}

// One pixel's gradients from its setup p (pixel_setup's; for a pixel without an output gradient, it may be left
// as constructed instead: both add nothing). kChannels as for texture_forward_sample.
template <int kChannels = 0, class Add>
PR_HD void texture_backward_sample(const TextureGradArgs& G, int64_t pix, const PixelSample& p, Add& add) {
  static_assert(kChannels >= 0 && kChannels <= kChannelBlock, "at most one block of channels");
  const TextureArgs& a = G.a;
  const int channels = kChannels ? kChannels : a.channels;
  const float* g = G.grad_out + pix * channels;
  if (!p.c.valid) return;
  const int64_t n_tex = tex_image(a, pix);
  const bool want_lod = p.lod_grad && (G.grad_uv_da || G.grad_bias || (a.cube && a.uv_da && G.grad_uv));
  // The texels are read only for the gradients of the pixel's coordinates; the texture's gradient needs none.
  const bool read_texels = G.grad_uv || want_lod;
  // The second level is read when it is blended in, or (at a blend weight of exactly 0) for the LOD gradient.
  const int sides = p.l1 != p.l0 && (p.f > 0.0f || want_lod) ? 2 : 1;
  // dots[side][k]: bilinear tap k of that level dotted with the output gradient.
  float dots[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  TapFrac fr[2];
  for (int c0 = 0; c0 < channels; c0 += kChannelBlock) {
    const int nc = kChannels ? kChannels : (channels - c0 < kChannelBlock ? channels - c0 : kChannelBlock);
    float gb[kChannelBlock] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < nc; ++j) gb[j] = g[c0 + j];
    for (int side = 0; side < sides; ++side) {
      const int level = side ? p.l1 : p.l0;
      const float wl = side ? p.f : 1.0f - p.f;
      const bool scatter = side == 0 || p.f > 0.0f;
      const float* tex = a.levels[level].data + c0;
      float* dk = dots[side];
      const TapFrac& f = fr[side];
      auto visit = [&](int k, int64_t off, float share) {
        const float w = wl * share * bilinear_weight(f, k);
        float d = 0.0f;
        if (read_texels)
          for (int j = 0; j < kChannelBlock; ++j)
            if (j < nc) d += tex[off + j] * gb[j];
        if (scatter) add_texel(add, level, off + c0, w, gb, nc);
        dk[k] += share * d;
      };
      visit_taps(a, level, n_tex, p.c, a.filter == kFilterNearest, fr[side], visit);
    }
  }
  // Gradient of the texture (or face) coordinates from each level's bilinear fractions, and each level's value.
  float guv[2] = {0.0f, 0.0f}, value[2] = {0.0f, 0.0f};
  for (int side = 0; side < sides; ++side) {
    const TapFrac& f = fr[side];
    const float* d = dots[side];
    if (f.n == 1) {
      value[side] = d[0];
      continue;
    }
    const int level = side ? p.l1 : p.l0;
    const float wl = side ? p.f : 1.0f - p.f;
    const float gx = (1.0f - f.fy) * (d[1] - d[0]) + f.fy * (d[3] - d[2]);
    const float gy = (1.0f - f.fx) * (d[2] - d[0]) + f.fx * (d[3] - d[1]);
    guv[0] += wl * gx * (float)a.levels[level].width;
    guv[1] += wl * gy * (float)a.levels[level].height;
    value[side] = (1.0f - f.fy) * ((1.0f - f.fx) * d[0] + f.fx * d[1]) + f.fy * ((1.0f - f.fx) * d[2] + f.fx * d[3]);
  }
  const float glod = sides == 2 ? value[1] - value[0] : 0.0f;
  float gj[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  if (want_lod) {
    if (G.grad_bias) G.grad_bias[pix] = glod;
    if (a.uv_da && p.j_grad) {
      // lod = 0.5 log2(m(j / k)) + log2(k) + bias; its gradient to j is that of the first term at j / k,
      // divided by k (see footprint_normalised).
      float jn[2][2], A, B, C, spread;
      const float k = footprint_normalised(p.j, jn);
      const float mn = footprint_major(jn, A, B, C, spread);
      footprint_major_backward(jn, glod * 0.5f / (mn * 0.69314718056f) / k, gj);
    }
  }
  if (a.cube) {
    float* gdir = G.grad_uv ? G.grad_uv + pix * 3 : nullptr;
    float* gda = G.grad_uv_da && want_lod ? G.grad_uv_da + pix * 6 : nullptr;
    const float* da = want_lod && a.uv_da ? a.uv_da + pix * 6 : nullptr;
    if (gdir || gda) cube_backward(p.cf, da, a.levels[0].width, guv[0], guv[1], gj, gdir, gda);
    return;
  }
  if (G.grad_uv) G.grad_uv[pix * 2] = guv[0], G.grad_uv[pix * 2 + 1] = guv[1];
  if (G.grad_uv_da && want_lod) {
    float* gda = G.grad_uv_da + pix * 4;
    const float W = (float)a.levels[0].width, H = (float)a.levels[0].height;
    gda[0] = W * gj[0][0], gda[2] = H * gj[0][1];
    gda[1] = W * gj[1][0], gda[3] = H * gj[1][1];
  }
}

template <class Add>
PR_HD void texture_backward_pixel(const TextureGradArgs& G, int64_t pix, Add& add) {
  if (any_output_gradient(G, pix)) texture_backward_sample(G, pix, pixel_setup(G.a, pix), add);
}

// --- entry points -------------------------------------------------------------------------------------------

void texture_forward_cpu(const TextureArgs& a, const ParallelFor& pfor);
// Elements of level l's gradient, and of all levels' (contiguous, level 0 first).
inline int64_t level_elements(const TextureArgs& a, int level) {
  return a.tex_batch * tex_faces(a) * (int64_t)a.levels[level].height * a.levels[level].width * a.channels;
}
inline int64_t gradient_elements(const TextureArgs& a) {
  int64_t total = 0;
  for (int l = 0; l < a.num_levels; ++l) total += level_elements(a, l);
  return total;
}
// Texels that many pixels add into (on average 16 or more: a texture smaller than the image) are summed in
// double. Where each gets a few, float sums lose nothing that matters, and a double copy twice the gradient's size
// would cost more than the scatter (it falls out of the cache: a 1024^2 RGB texture's nearest-filter backward took
// four times its forward with one).
inline bool wide_texture_sums(const TextureArgs& a) {
  const int taps = a.filter == kFilterNearest ? 1 : a.filter == kFilterMipLinear ? 8 : 4;
  return gradient_elements(a) * 16 <= a.num_pixels * taps * a.channels;
}

// A mip level's reduction (mip_down: src -> dst) or its adjoint (mip_down_adjoint: src = the next level's gradient,
// dst = this level's, added to when accumulate): the kernel library's argument struct for both.
struct MipArgs {
  const float* src;
  int64_t batch;
  int height, width, channels;  // of the larger level
  float* dst;
  bool accumulate;
};

void texture_backward_cpu(const TextureGradArgs& g, const ParallelFor& pfor, int num_threads);
// src [B, sh, sw, C] -> dst [B, mip_size(sh), mip_size(sw), C]
void mip_down_cpu(const float* src, int64_t B, int sh, int sw, int C, float* dst, const ParallelFor& pfor);
// grad [B, sh, sw, C] = (or, accumulate: +=) adjoint of mip_down applied to grad_next [B, mip_size(sh),
// mip_size(sw), C]
void mip_down_adjoint_cpu(const float* grad_next, int64_t B, int sh, int sw, int C, float* grad, bool accumulate,
                          const ParallelFor& pfor);

const char* texture_forward_cuda(const TextureArgs& a, StreamHandle stream);
const char* texture_backward_cuda(const TextureGradArgs& g, StreamHandle stream, const Workspace& ws);
const char* mip_down_cuda(const float* src, int64_t B, int sh, int sw, int C, float* dst, StreamHandle stream);
const char* mip_down_adjoint_cuda(const float* grad_next, int64_t B, int sh, int sw, int C, float* grad,
                                  bool accumulate, StreamHandle stream);

}  // namespace prerast
