// The torch-free core (csrc/core) on its own: a fixed scene generated here (a wavy wall, a closed cube, a soup of
// small triangles and a floor triangle that crosses w = 0, seen by two cameras) goes through the whole pipeline on
// the CPU entry points, forward and backward: rasterize, interpolate with derivatives, a 2D texture and a cube map
// (linear-mipmap-linear, mip chains built by the core), antialias. Prints one FNV-1a checksum of the raw float bytes
// per output, a few counts and sample values. Every input is made by integer arithmetic and IEEE float operations
// (no libm, no <random>), so that the same bits go in on every platform; tests/test_core_platforms.py compiles this
// with each toolchain it finds (gcc, clang, mingw-w64 under wine, aarch64 under qemu) and compares the checksums.
//
//   g++ -std=c++17 -O3 -ffp-contract=off -I csrc/core tests/host/core_driver.cpp csrc/core/*_cpu.cpp
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "antialias.h"
#include "interpolate.h"
#include "rasterize.h"
#include "texture.h"

using namespace prerast;
using Buf = std::vector<float>;

namespace {

// Runs everything on the calling thread, as torch's pool does with one thread.
const ParallelFor kSerial = [](int64_t n, int64_t, const std::function<void(int64_t, int64_t)>& fn) {
  if (n > 0) fn(0, n);
};

uint32_t state = 12345u;
float uniform() {  // [-1, 1) in steps of 2^-23, from a 32-bit LCG
  state = state * 1664525u + 1013904223u;
  return (float)(int32_t)(state >> 8) / 8388608.0f - 1.0f;
}

uint64_t fnv1a(const Buf& b) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(b.data());
  for (size_t i = 0; i < b.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void report(const char* name, const Buf& b) {
  int64_t nonzero = 0;
  for (float x : b) nonzero += x != 0.0f;
  std::printf("checksum %-14s %016llx  elements %lld nonzero %lld\n", name, (unsigned long long)fnv1a(b),
              (long long)b.size(), (long long)nonzero);
}

// Channels [c0, c0 + k) of a [P, C] image as a [P, k] one.
Buf channels(const Buf& src, int C, int c0, int k) {
  Buf out(src.size() / C * k);
  for (size_t p = 0; p < src.size() / C; ++p)
    for (int j = 0; j < k; ++j) out[p * k + j] = src[p * C + c0 + j];
  return out;
}

// A texture's mip chain, built by the core: one buffer per level, [B, h, w, C].
struct Mips {
  std::vector<Buf> level;
  std::vector<int> h, w;
};
Mips mip_chain(int B, int h, int w, int C) {
  Mips m;
  m.level.push_back(Buf((size_t)B * h * w * C));
  for (float& x : m.level[0]) x = 0.5f + 0.5f * uniform();
  m.h.push_back(h), m.w.push_back(w);
  while (h > 1 || w > 1) {
    Buf next((size_t)B * mip_size(h) * mip_size(w) * C);
    mip_down_cpu(m.level.back().data(), B, h, w, C, next.data(), kSerial);
    h = mip_size(h), w = mip_size(w);
    m.level.push_back(next), m.h.push_back(h), m.w.push_back(w);
  }
  return m;
}

// texture over one mip chain; returns the output. With grad_out also the backward: fills the gradients of the
// texture (the levels' folded into level 0, as the binding does), of uv and of uv_da.
Buf sample(const Mips& m, bool cube, int C, const Buf& uv, const Buf& uv_da, int64_t pixels, int64_t per_image,
           const Buf* grad_out = nullptr, Buf* grad_tex = nullptr, Buf* grad_uv = nullptr, Buf* grad_uv_da = nullptr) {
  TextureArgs a;
  a.num_levels = (int)m.level.size();
  for (int l = 0; l < a.num_levels; ++l) a.levels[l] = {m.level[l].data(), m.h[l], m.w[l]};
  a.channels = C, a.cube = cube;
  a.filter = kFilterMipLinear, a.boundary = cube ? kBoundaryCube : kBoundaryWrap;
  a.num_pixels = pixels, a.pixels_per_image = per_image;
  a.uv = uv.data(), a.uv_da = uv_da.data();
  Buf out((size_t)pixels * C);
  a.out = out.data();
  texture_forward_cpu(a, kSerial);
  if (!grad_out) return out;

  TextureGradArgs g;
  g.a = a;
  g.grad_out = grad_out->data();
  Buf flat((size_t)gradient_elements(a), 0.0f);  // every level's gradient, back to back
  for (int l = 0, at = 0; l < a.num_levels; at += (int)level_elements(a, l), ++l) g.grad_levels[l] = flat.data() + at;
  grad_uv->assign(uv.size(), 0.0f), grad_uv_da->assign(uv_da.size(), 0.0f);
  g.grad_uv = grad_uv->data(), g.grad_uv_da = grad_uv_da->data();
  texture_backward_cpu(g, kSerial, 4);
  const int64_t B = cube ? 6 : 1;
  for (int l = a.num_levels - 1; l > 0; --l)
    mip_down_adjoint_cpu(g.grad_levels[l], B, m.h[l - 1], m.w[l - 1], C, g.grad_levels[l - 1], true, kSerial);
  grad_tex->assign(flat.begin(), flat.begin() + level_elements(a, 0));
  return out;
}

}  // namespace

int main() {
  const int N = 2, W = 100, H = 76, A = 5;  // attributes: u, v and a direction (x, y, z) for the cube map
  Buf world, attr;                          // [V, 3] and [V, A]
  std::vector<int32_t> tri;
  auto vertex = [&](float x, float y, float z, float u, float v) {
    world.insert(world.end(), {x, y, z});
    attr.insert(attr.end(), {u, v, x - 0.3f, y - 0.1f, z - 2.5f});  // the direction from the cube's centre
    return (int32_t)(world.size() / 3 - 1);
  };
  const int G = 12;  // the wall: a G x G grid of vertices, 2 (G - 1)^2 triangles
  for (int j = 0; j < G; ++j)
    for (int i = 0; i < G; ++i)
      vertex(-2.0f + 4.0f * (float)i / (G - 1), -1.5f + 3.0f * (float)j / (G - 1), 4.0f + 0.3f * uniform(),
             3.0f * (float)i / (G - 1), 3.0f * (float)j / (G - 1));
  for (int j = 0; j + 1 < G; ++j)
    for (int i = 0; i + 1 < G; ++i) {
      const int32_t q = j * G + i;
      tri.insert(tri.end(), {q, q + 1, q + G + 1, q, q + G + 1, q + G});
    }
  // The cube: corners at +-0.6, turned about y by (24/25, 7/25) and about x by (4/5, 3/5), centred at (0.3, 0.1, 2.5).
  const float cy = 24.0f / 25.0f, sy = 7.0f / 25.0f, cx = 0.8f, sx = 0.6f;
  const int32_t c0 = (int32_t)(world.size() / 3);
  for (int k = 0; k < 8; ++k) {
    const float x = k & 1 ? 0.6f : -0.6f, y = k & 2 ? 0.6f : -0.6f, z = k & 4 ? 0.6f : -0.6f;
    const float x1 = cy * x + sy * z, z1 = cy * z - sy * x;
    const float y2 = cx * y - sx * z1, z2 = sx * y + cx * z1;
    vertex(x1 + 0.3f, y2 + 0.1f, z2 + 2.5f, (float)(k & 1), (float)(k >> 1 & 1));
  }
  const int faces[6][4] = {{0, 1, 3, 2}, {4, 6, 7, 5}, {0, 4, 5, 1}, {2, 3, 7, 6}, {0, 2, 6, 4}, {1, 5, 7, 3}};
  for (const auto& f : faces) tri.insert(tri.end(), {c0 + f[0], c0 + f[1], c0 + f[2], c0 + f[0], c0 + f[2], c0 + f[3]});
  for (int t = 0; t < 40; ++t) {  // a soup of small triangles, some through the cube and each other
    const float x = 1.2f * uniform(), y = 0.9f * uniform(), z = 2.5f + uniform();
    int32_t v[3];
    for (int32_t& k : v) {
      float r[5];  // drawn in order: the order in which a call's arguments are evaluated differs between compilers
      for (float& e : r) e = uniform();
      k = vertex(x + 0.25f * r[0], y + 0.25f * r[1], z + 0.25f * r[2], 1.0f + r[3], 1.0f + r[4]);
    }
    tri.insert(tri.end(), {v[0], v[1], v[2]});
  }
  // A floor reaching behind the camera (w < 0 there): clipped for its bounding box only.
  tri.insert(tri.end(), {vertex(-3.0f, -0.8f, -1.0f, 0.0f, 0.0f), vertex(3.0f, -0.8f, -1.0f, 2.0f, 0.0f),
                         vertex(0.0f, -0.8f, 8.0f, 1.0f, 2.0f)});
  const int64_t V = (int64_t)world.size() / 3, T = (int64_t)tri.size() / 3;

  // Clip space per camera: the second one turned about y by (40/41, 9/41) around the cube's depth and shifted.
  // Perspective with focal length 1.5, near plane 0.5, far plane 10, looking down +z (w = z).
  Buf pos((size_t)N * V * 4);
  const float f = 1.5f, zn = 0.5f, zf = 10.0f, aspect = (float)W / (float)H;
  const float za = (zf + zn) / (zf - zn), zb = -2.0f * zf * zn / (zf - zn);
  for (int n = 0; n < N; ++n)
    for (int64_t i = 0; i < V; ++i) {
      float x = world[i * 3], y = world[i * 3 + 1], z = world[i * 3 + 2];
      if (n == 1) {
        const float c = 40.0f / 41.0f, s = 9.0f / 41.0f;
        const float xr = c * x + s * (z - 2.5f), zr = c * (z - 2.5f) - s * x + 2.5f;
        x = xr + 0.1f, y = y - 0.05f, z = zr;
      }
      float* p = pos.data() + ((int64_t)n * V + i) * 4;
      p[0] = f / aspect * x, p[1] = f * y, p[2] = za * z + zb, p[3] = z;
    }

  // rasterize
  const int64_t P = (int64_t)N * H * W;
  Buf rast(P * 4), rast_db(P * 4);
  RasterArgs ra;
  ra.pos = pos.data(), ra.tri = tri.data();
  ra.num_images = N, ra.num_vertices = V, ra.num_triangles = T;
  ra.height = H, ra.width = W;
  ra.rast = rast.data(), ra.rast_db = rast_db.data();
  rasterize_forward_cpu(ra, kSerial, 4);

  // interpolate, every attribute with its derivatives
  const int32_t diff[A] = {0, 1, 2, 3, 4};
  Buf out(P * A), out_da(P * 2 * A);
  InterpArgs ia;
  ia.attr = attr.data(), ia.rast = rast.data(), ia.rast_db = rast_db.data(), ia.tri = tri.data(), ia.diff = diff;
  ia.num_pixels = P, ia.pixels_per_image = (int64_t)H * W;
  ia.num_vertices = V, ia.num_attrs = A, ia.num_diff = A, ia.num_triangles = T;
  ia.out = out.data(), ia.out_da = out_da.data();
  interpolate_forward_cpu(ia, kSerial);

  // textures (forward only here: their backward needs antialias' color gradient): the 2D one from (u, v), the cube
  // map from the direction; color = their mean
  const Mips tex2d = mip_chain(1, 48, 64, 3), cube = mip_chain(6, 16, 16, 3);
  const Buf uv = channels(out, A, 0, 2), dir = channels(out, A, 2, 3);
  const Buf uv_da = channels(out_da, 2 * A, 0, 4), dir_da = channels(out_da, 2 * A, 4, 6);
  const Buf color2d = sample(tex2d, false, 3, uv, uv_da, P, (int64_t)H * W);
  const Buf colorcube = sample(cube, true, 3, dir, dir_da, P, (int64_t)H * W);
  Buf color(P * 3);
  for (int64_t k = 0; k < P * 3; ++k) color[k] = 0.5f * color2d[k] + 0.5f * colorcube[k];

  // antialias: the edge -> triangles table as antialias_construct_topology_hash builds it
  std::vector<int64_t> key(3 * T);
  for (int64_t h = 0; h < 3 * T; ++h) {
    const int64_t t = h / 3, i = h % 3, a = tri[t * 3 + (i + 1) % 3], b = tri[t * 3 + (i + 2) % 3];
    key[h] = std::min(a, b) << 32 | std::max(a, b);
  }
  std::vector<int32_t> half_edges(3 * T), group_of(3 * T), group_start(3 * T + 1, (int32_t)(3 * T));
  for (int32_t h = 0; h < 3 * T; ++h) half_edges[h] = h;
  std::stable_sort(half_edges.begin(), half_edges.end(), [&](int32_t x, int32_t y) { return key[x] < key[y]; });
  for (int32_t s = 0, g = -1; s < 3 * T; ++s) {
    if (s == 0 || key[half_edges[s]] != key[half_edges[s - 1]]) group_start[++g] = s;
    group_of[half_edges[s]] = g;
  }
  Buf aa_out(P * 3), crossing(P * 2), grad_color(P * 3), aa_grad_pos(pos.size(), 0.0f), aa_grad_out(P * 3);
  for (float& g : aa_grad_out) g = uniform();  // the loss: a fixed random weighting of the antialiased image
  AntialiasArgs aa;
  aa.color = color.data(), aa.rast = rast.data(), aa.pos = pos.data(), aa.tri = tri.data();
  aa.half_edges = half_edges.data(), aa.group_of = group_of.data(), aa.group_start = group_start.data();
  aa.instanced = true, aa.num_images = N, aa.num_vertices = V, aa.num_triangles = T, aa.channels = 3;
  aa.height = H, aa.width = W;
  aa.crossing = crossing.data(), aa.out = aa_out.data();
  antialias_forward_cpu(aa, kSerial);
  aa.grad_out = aa_grad_out.data(), aa.grad_color = grad_color.data(), aa.grad_pos = aa_grad_pos.data();
  antialias_backward_cpu(aa, kSerial, 4);

  // texture backwards, from half of the color gradient each
  Buf half(P * 3);
  for (int64_t k = 0; k < P * 3; ++k) half[k] = 0.5f * grad_color[k];
  Buf gtex2d, guv, guv_da, gcube, gdir, gdir_da;
  sample(tex2d, false, 3, uv, uv_da, P, (int64_t)H * W, &half, &gtex2d, &guv, &guv_da);
  sample(cube, true, 3, dir, dir_da, P, (int64_t)H * W, &half, &gcube, &gdir, &gdir_da);

  // interpolate backward: the gradients of (u, v, direction) and of their derivatives
  Buf grad_out(P * A), grad_da(P * 2 * A), grad_attr(attr.size(), 0.0f), grad_rast(P * 4), grad_db(P * 4);
  for (int64_t p = 0; p < P; ++p) {
    for (int j = 0; j < 2; ++j) grad_out[p * A + j] = guv[p * 2 + j];
    for (int j = 0; j < 3; ++j) grad_out[p * A + 2 + j] = gdir[p * 3 + j];
    for (int j = 0; j < 4; ++j) grad_da[p * 2 * A + j] = guv_da[p * 4 + j];
    for (int j = 0; j < 6; ++j) grad_da[p * 2 * A + 4 + j] = gdir_da[p * 6 + j];
  }
  ia.grad_out = grad_out.data(), ia.grad_da = grad_da.data(), ia.grad_attr = grad_attr.data();
  ia.grad_rast = grad_rast.data(), ia.grad_db = grad_db.data();
  interpolate_backward_cpu(ia, kSerial, 4, int64_t(256) << 20);

  // rasterize backward
  Buf grad_pos(pos.size(), 0.0f);
  RasterGradArgs rg;
  rg.pos = pos.data(), rg.tri = tri.data(), rg.instanced = true;
  rg.num_images = N, rg.num_vertices = V, rg.num_triangles = T, rg.height = H, rg.width = W;
  rg.rast = rast.data(), rg.grad_rast = grad_rast.data(), rg.grad_db = grad_db.data(), rg.grad_pos = grad_pos.data();
  rasterize_backward_cpu(rg, kSerial, 4);

  std::printf("scene vertices %lld triangles %lld images %d x %d x %d\n", (long long)V, (long long)T, N, H, W);
  int64_t covered = 0, blended = 0;
  for (int64_t p = 0; p < P; ++p) covered += rast[p * 4 + 3] != 0.0f;
  for (float t : crossing) blended += t >= 0.0f;
  std::printf("covered %lld blended %lld\n", (long long)covered, (long long)blended);
  const struct {
    const char* name;
    const Buf* b;
  } outputs[] = {{"pos", &pos},
                 {"rast", &rast},
                 {"rast_db", &rast_db},
                 {"interp", &out},
                 {"interp_da", &out_da},
                 {"tex2d", &color2d},
                 {"texcube", &colorcube},
                 {"aa_out", &aa_out},
                 {"aa_crossing", &crossing},
                 {"grad_color", &grad_color},
                 {"aa_grad_pos", &aa_grad_pos},
                 {"grad_tex2d", &gtex2d},
                 {"grad_uv", &guv},
                 {"grad_uv_da", &guv_da},
                 {"grad_cube", &gcube},
                 {"grad_dir", &gdir},
                 {"grad_dir_da", &gdir_da},
                 {"grad_attr", &grad_attr},
                 {"grad_rast", &grad_rast},
                 {"grad_db", &grad_db},
                 {"grad_pos", &grad_pos}};
  for (const auto& o : outputs) report(o.name, *o.b);
  const int64_t centre = (int64_t)(H / 2) * W + W / 2;
  std::printf("sample rast %.9g %.9g %.9g %.9g\n", rast[centre * 4], rast[centre * 4 + 1], rast[centre * 4 + 2],
              rast[centre * 4 + 3]);
  std::printf("sample aa_out %.9g %.9g %.9g\n", aa_out[centre * 3], aa_out[centre * 3 + 1], aa_out[centre * 3 + 2]);
  std::printf("sample grad_pos %.9g %.9g %.9g\n", grad_pos[c0 * 4], grad_pos[c0 * 4 + 1], grad_pos[c0 * 4 + 3]);
  return 0;
}
