// The CUDA backward's per-pixel gradient (frag_grad_pixel, csrc/core/rasterize.h) on the host, against the CPU
// backward's run formula for the same pixel (frag_grad_terms, frag_grad_rows, frag_grad_apply in double), which
// the Python tests hold to float64 models. Random triangles: sizes from under a pixel to the screen, per-vertex w,
// per-vertex scales up to 2^40, resolutions 64 to 8192. Prints the pixels compared, the largest error relative to
// each vertex's largest gradient component (triangles without, then with per-vertex scales), and the count of
// non-finite results.
#include <cmath>
#include <cstdio>
#include <random>

#include "rasterize.h"

using namespace prerast;

// The pixels sampled: every covered centre on a grid over the triangle's box with a pixel of margin (tri_setup's box
// is the centres within the hull). Kept as it was when the bound below was set: each covered pixel draws its
// random gradients, so another grid would also change every later triangle.
static void sampled_box(const float p[3][4], int W, int H, int& x0, int& y0, int& x1, int& y1) {
  float lo_x = 3.0e38f, lo_y = 3.0e38f, hi_x = -3.0e38f, hi_y = -3.0e38f;
  for (int v = 0; v < 3; ++v) {
    const float X = (p[v][0] / p[v][3] + 1.0f) * 0.5f * (float)W - 0.5f;
    const float Y = (p[v][1] / p[v][3] + 1.0f) * 0.5f * (float)H - 0.5f;
    lo_x = std::fmin(lo_x, X), hi_x = std::fmax(hi_x, X), lo_y = std::fmin(lo_y, Y), hi_y = std::fmax(hi_y, Y);
  }
  const auto clamp = [](float x, float lo, float hi) { return std::fmin(std::fmax(x, lo), hi); };
  lo_x = clamp(lo_x, -2.0f, (float)W + 1.0f), hi_x = clamp(hi_x, -2.0f, (float)W + 1.0f);
  lo_y = clamp(lo_y, -2.0f, (float)H + 1.0f), hi_y = clamp(hi_y, -2.0f, (float)H + 1.0f);
  x0 = clampi((int)std::floor(lo_x) - 1, 0, W), x1 = clampi((int)std::ceil(hi_x) + 1, -1, W - 1);
  y0 = clampi((int)std::floor(lo_y) - 1, 0, H), y1 = clampi((int)std::ceil(hi_y) + 1, -1, H - 1);
}

int main() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  long pixels = 0, nonfinite = 0;
  double worst[2] = {0.0, 0.0};  // triangles without / with per-vertex scales
  for (int it = 0; it < 4000; ++it) {
    const int W = 64 << (it % 8), H = 64 << ((it / 8) % 8);
    const float size = std::pow(10.0f, -3.5f + 3.5f * (0.5f + 0.5f * uni(rng)));  // NDC, 3e-4 to 1
    const float cx = 0.9f * uni(rng), cy = 0.9f * uni(rng);
    float p[3][4];
    for (int v = 0; v < 3; ++v) {
      const float w = std::pow(10.0f, 0.5f * uni(rng));                           // 0.3 to 3
      const float k = std::ldexp(1.0f, (int)(40.0f * uni(rng)) * (it % 3 == 0));  // every third: scales to 2^40
      const float x = cx + size * uni(rng), y = cy + size * uni(rng), z = 0.5f * uni(rng);
      p[v][0] = x * w * k, p[v][1] = y * w * k, p[v][2] = z * w * k, p[v][3] = w * k;
    }
    TriSetup s;
    if (!tri_setup(p[0], p[1], p[2], 0, W, H, s)) continue;  // also where no centre is covered: none to sample
    GradTri g;
    frag_grad_tri(p[0], p[1], p[2], g);
    int x0, y0, x1, y1;
    sampled_box(p, W, H, x0, y0, x1, y1);
    for (int y = y0; y <= y1; y += 1 + (y1 - y0) / 16)
      for (int x = x0; x <= x1; x += 1 + (x1 - x0) / 16) {
        const float px = pixel_center_ndc(x, W), py = pixel_center_ndc(y, H);
        float zw;
        if (!frag_eval(s, px, py, zw)) continue;
        const float gu = uni(rng), gv = uni(rng), gdb[4] = {uni(rng), uni(rng), uni(rng), uni(rng)};
        float gpu[3][4];
        frag_grad_pixel(g, px, py, W, H, gu, gv, gdb, gpu);
        const float dx = px - g.ox, dy = py - g.oy;
        float gl[3], gx[3], gy[3], G[3][3];
        const float S = frag_grad_terms<float>(g.K, g.Kw, g.bw, dx, dy, W, H, gu, gv, gdb, gl, gx, gy, false);
        if (!(g.float_ok && S >= kMinWeightedSum)) continue;  // the CPU sends these to frag_grad_pixel itself
        frag_grad_rows<float>(gl, gx, gy, dx, dy, G);
        double K[3][3], Kw[3][3], Gd[3][3], cpu[3][4];
        for (int i = 0; i < 3; ++i)
          for (int c = 0; c < 3; ++c) K[i][c] = g.K[i][c], Kw[i][c] = g.Kw[i][c], Gd[i][c] = G[i][c];
        frag_grad_apply<double>(K, Kw, Gd, cpu);
        untranslate_grad<double>(cpu, g.ox, g.oy);
        // Per vertex, relative to that vertex's largest component (vertex scales differ by up to 2^80).
        bool finite = true;
        for (int v = 0; v < 3; ++v) {
          double big = 0.0, err = 0.0;
          for (int k : {0, 1, 3}) {
            const double want = cpu[v][k] * g.scale[v];
            finite = finite && std::isfinite(gpu[v][k]);
            big = std::fmax(big, std::fabs(want));
            err = std::fmax(err, std::fabs(gpu[v][k] - want));
          }
          if (big > 0.0 && std::isfinite(err)) worst[it % 3 == 0] = std::fmax(worst[it % 3 == 0], err / big);
        }
        ++pixels;
        if (!finite) ++nonfinite;
      }
  }
  std::printf("%ld %.3e %.3e %ld\n", pixels, worst[0], worst[1], nonfinite);
  return 0;
}
