// texture_fwd / texture_bwd and the mip construction ops: validation, allocation and dispatch to the core.
#include "shading_common.h"
#include "../core/texture.h"

namespace prerast {
namespace {

constexpr const char* kOp = "texture";
constexpr const char* kMipOp = "texture_construct_mip";

// Number of levels of a full chain for a level 0 of h x w texels: halvings until both sides are 1.
int full_chain_levels(int64_t h, int64_t w) {
  int levels = 1;
  for (int64_t s = std::max(h, w); s > 1; s /= 2) ++levels;
  return levels;
}

void check_texture(const Tensor& tex, bool cube) {
  check_tensor(kOp, "tex", tex, Dtype::Float, {4, 5});
  if (cube) {
    PR_CHECK_VALUE(tex.dim() == 5 && tex.size(1) == 6 && tex.size(2) == tex.size(3), kOp,
                   ": boundary_mode='cube' needs a cube map tex of shape [N, 6, S, S, C], got ", shape_str(tex));
  } else {
    PR_CHECK_VALUE(tex.dim() == 4, kOp, ": a 2D texture has shape [N, H, W, C]; got tex of shape ", shape_str(tex),
                   " (a cube map needs boundary_mode='cube')");
  }
  const int64_t h = tex.size(tex.dim() - 3), w = tex.size(tex.dim() - 2), c = tex.size(tex.dim() - 1);
  PR_CHECK_VALUE(tex.size(0) > 0 && h > 0 && w > 0 && c > 0, kOp,
                 ": tex must have at least one texture, texel and channel, got shape ", shape_str(tex));
  PR_CHECK_VALUE(h <= kMaxTextureSide && w <= kMaxTextureSide, kOp, ": tex of shape ", shape_str(tex),
                 " exceeds the limit of ", kMaxTextureSide, " texels per side");
}

// Checks every input and fills the core's arguments (out left null).
TextureArgs make_args(const Tensor& tex, const Tensor& uv, const OptTensor& uv_da, const OptTensor& bias,
                      const TensorListArg& mip, int64_t filter, int64_t boundary) {
  PR_CHECK_VALUE(filter >= kFilterNearest && filter <= kFilterMipLinear, kOp, ": unknown filter mode ", filter);
  PR_CHECK_VALUE(boundary >= kBoundaryWrap && boundary <= kBoundaryCube, kOp, ": unknown boundary mode ", boundary);
  const bool cube = boundary == kBoundaryCube;
  check_texture(tex, cube);
  const int uvd = cube ? 3 : 2;
  check_tensor(kOp, "uv", uv, Dtype::Float, {4});
  check_dim(kOp, "uv", uv, 3, uvd);
  check_same_device(kOp, "uv", uv, tex, "tex");
  const int64_t N = uv.size(0), H = uv.size(1), W = uv.size(2);
  PR_CHECK_VALUE(tex.size(0) == 1 || tex.size(0) == N, kOp, ": tex holds ", tex.size(0), " textures but uv has ", N,
                 " images; give one texture per image or a single one for all");
  if (uv_da.has_value()) {
    check_tensor(kOp, "uv_da", *uv_da, Dtype::Float, {4});
    check_same_device(kOp, "uv_da", *uv_da, tex, "tex");
    PR_CHECK_VALUE(uv_da->size(0) == N && uv_da->size(1) == H && uv_da->size(2) == W && uv_da->size(3) == 2 * uvd, kOp,
                   ": uv_da must have shape [", N, ", ", H, ", ", W, ", ", 2 * uvd, "], got ", shape_str(*uv_da));
  }
  if (bias.has_value()) {
    check_tensor(kOp, "mip_level_bias", *bias, Dtype::Float, {3});
    check_same_device(kOp, "mip_level_bias", *bias, tex, "tex");
    PR_CHECK_VALUE(bias->size(0) == N && bias->size(1) == H && bias->size(2) == W, kOp,
                   ": mip_level_bias must have shape [", N, ", ", H, ", ", W, "], got ", shape_str(*bias));
  }
  TextureArgs a;
  a.cube = cube;
  a.filter = (int)filter, a.boundary = (int)boundary;
  a.tex_batch = tex.size(0);
  a.channels = (int)tex.size(-1);
  a.num_pixels = N * H * W;
  a.pixels_per_image = H * W;
  a.uv = data<float>(uv);
  a.uv_da = uv_da.has_value() ? data<float>(*uv_da) : nullptr;
  a.bias = bias.has_value() ? data<float>(*bias) : nullptr;

  int h = (int)tex.size(-3), w = (int)tex.size(-2);
  const int most = full_chain_levels(h, w) - 1;
  PR_CHECK_VALUE((int64_t)mip.size() <= most, kOp, ": mip has ", mip.size(), " levels but a texture of ", h, " x ", w,
                 " texels has only ", most, " below level 0");
  a.num_levels = 1 + (int)mip.size();
  a.levels[0] = {data<float>(tex), h, w};
  for (size_t k = 0; k < mip.size(); ++k) {
    h = mip_size(h), w = mip_size(w);
    const Tensor& m = mip[k];
    const std::string name = "mip[" + std::to_string(k) + "]";
    check_tensor(kOp, name.c_str(), m, Dtype::Float, {tex.dim()});
    check_same_device(kOp, name.c_str(), m, tex, "tex");
    auto want = sizes(tex);
    want[want.size() - 3] = h, want[want.size() - 2] = w;
    PR_CHECK_VALUE(sizes(m) == want, kOp, ": ", name, " (mip level ", k + 1, ") must have shape ", shape_str(want),
                   ", got ", shape_str(m));
    a.levels[k + 1] = {data<float>(m), h, w};
  }
  return a;
}

Tensor texture_sample(const Tensor& tex, const Tensor& uv, const OptTensor& uv_da, const OptTensor& bias,
                      const TensorListArg& mip, int64_t filter, int64_t boundary) {
  TextureArgs a = make_args(tex, uv, uv_da, bias, mip, filter, boundary);
  check_host_memory(kOp, tex, bytes_of({uv.size(0), uv.size(1), uv.size(2), tex.size(-1)}));
  auto out = new_output(kOp, tex, {uv.size(0), uv.size(1), uv.size(2), tex.size(-1)});
  a.out = data<float>(out);
  run_on_device(
      kOp, tex, [&] { kernels::cpu("texture_forward_cpu", a); },
      [&](StreamHandle s) { return kernels::cuda("texture_forward_cuda", a, s); });
  return out;
}

// Adds the adjoint of halving `level_grad` ([B, h, w, C]) into `to` (the gradient of the level it was made from,
// [B, H, W, C]).
void add_mip_down_adjoint(const Tensor& level_grad, const Tensor& to, int64_t B, int H, int W, int C) {
  const float* next = data<float>(level_grad);
  float* dst = data<float>(to);
  run_on_device(
      kOp, to, [&] { kernels::cpu("mip_down_adjoint_cpu", MipArgs{next, B, H, W, C, dst, true}); },
      [&](StreamHandle s) { return kernels::cuda("mip_down_adjoint_cuda", MipArgs{next, B, H, W, C, dst, true}, s); });
}

// Returns [grad_tex, grad_uv, grad_uv_da, grad_mip_level_bias, grad_mip[0], ...]; a gradient the filter mode
// does not produce is an empty tensor. Without fold_mip, grad_tex holds level 0's own gradient and folding the
// levels' back is the caller's. With it, mip must be the chain of tex (texture_mip_down applied again and again),
// and grad_tex is the whole gradient: each level's gradient is folded into the one above it in place, from the
// smallest up (the grad_mip entries are then empty). No two outputs share memory (a custom op's outputs must not
// alias each other).
// The texture_fwd op; mip None is no levels.
Tensor texture_fwd(const Tensor& tex, const Tensor& uv, const OptTensor& uv_da, const OptTensor& bias,
                   const OptTensorListArg& mip, int64_t filter, int64_t boundary) {
  return texture_sample(tex, uv, uv_da, bias, list_or_empty(mip), filter, boundary);
}

std::vector<Tensor> texture_grad(const Tensor& tex, const Tensor& uv, const OptTensor& uv_da, const OptTensor& bias,
                                 const TensorListArg& mip, int64_t filter, int64_t boundary, const Tensor& grad_out,
                                 bool fold_mip) {
  TextureGradArgs g;
  g.a = make_args(tex, uv, uv_da, bias, mip, filter, boundary);
  check_tensor(kOp, "grad of the output", grad_out, Dtype::Float, {4});
  check_same_device(kOp, "grad of the output", grad_out, tex, "tex");
  const std::vector<int64_t> out_shape = {uv.size(0), uv.size(1), uv.size(2), tex.size(-1)};
  PR_CHECK_VALUE(sizes(grad_out) == out_shape, kOp, ": grad of the output has shape ", shape_str(grad_out),
                 ", expected ", shape_str(out_shape));
  g.grad_out = data<float>(grad_out);
  const auto none = [&] { return allocate(kOp, tex, {0}, Dtype::Float); };
  // The level gradients are views of one zeroed buffer, back to back (as both paths need); without levels the
  // texture's gradient is a tensor of its own.
  int64_t total = tex.numel();
  for (const Tensor& m : mip) total += m.numel();
  // Every level's gradient (the levels below 0 twice: they are copied out of the shared buffer), and uv's,
  // uv_da's and mip_level_bias's at most.
  check_host_memory(kOp, tex,
                    bytes_of({fold_mip ? total : 2 * total - tex.numel()}) + bytes_of({uv.numel()}) +
                        (uv_da.has_value() ? bytes_of({uv_da->numel()}) : 0.0) +
                        (bias.has_value() ? bytes_of({bias->numel()}) : 0.0));
  const Tensor flat = mip.empty() ? gradient_like(kOp, tex) : new_gradient(kOp, tex, {total});
  const Tensor level0 = mip.empty() ? flat : facade::view(facade::narrow(flat, 0, 0, tex.numel()), sizes(tex));
  std::vector<Tensor> result = {level0, none(), none(), none()};
  g.grad_levels[0] = data<float>(result[0]);
  int64_t offset = tex.numel();
  for (size_t k = 0; k < mip.size(); ++k) {
    result.push_back(facade::view(facade::narrow(flat, 0, offset, mip[k].numel()), sizes(mip[k])));
    g.grad_levels[k + 1] = data<float>(result.back());
    offset += mip[k].numel();
  }
  if (filter != kFilterNearest) {
    result[1] = gradient_like(kOp, uv);
    g.grad_uv = data<float>(result[1]);
  }
  if (filter == kFilterMipLinear && !mip.empty()) {
    if (uv_da.has_value()) {
      result[2] = gradient_like(kOp, *uv_da);
      g.grad_uv_da = data<float>(result[2]);
    }
    if (bias.has_value()) {
      result[3] = gradient_like(kOp, *bias);
      g.grad_bias = data<float>(result[3]);
    }
  }
  run_on_device(
      kOp, tex, [&] { kernels::cpu("texture_backward_cpu", g); },
      [&](StreamHandle s) {
        TensorWorkspace ws{kOp, tex, {}};
        return kernels::cuda("texture_backward_cuda", g, s, ws);
      });
  if (fold_mip) {
    // Level 0 stays a view of the start of the buffer that also held the levels' gradients: autograd keeps that
    // view as tex.grad, with the buffer (a third more than tex) until the gradient is freed or replaced. A copy
    // would cost as much time as the fold itself, for memory that the backward needed at its peak anyway.
    // Level l's gradient (result[3 + l]) goes into level l - 1's (result[0] for level 0).
    for (int l = g.a.num_levels - 1; l > 0; --l) {
      const TexLevel& above = g.a.levels[l - 1];
      add_mip_down_adjoint(result[3 + l], result[l == 1 ? 0 : 2 + l], g.a.tex_batch * tex_faces(g.a), above.height,
                           above.width, g.a.channels);
      result[3 + l] = none();
    }
    return result;
  }
  // The levels' gradients (a third of level 0's size at most) move out of the shared buffer; level 0 stays a
  // view of its start.
  for (size_t k = 4; k < result.size(); ++k) result[k] = facade::clone(result[k]);
  return result;
}

// The texture_bwd op; mip None is no levels.
std::vector<Tensor> texture_bwd(const Tensor& tex, const Tensor& uv, const OptTensor& uv_da, const OptTensor& bias,
                                const OptTensorListArg& mip, int64_t filter, int64_t boundary, const Tensor& grad_out,
                                bool fold_mip) {
  const TensorListArg levels = list_or_empty(mip);
  return texture_grad(tex, uv, uv_da, bias, levels, filter, boundary, grad_out, fold_mip);
}

void check_level(const char* name, const Tensor& t) {
  check_tensor(kMipOp, name, t, Dtype::Float, {4});
  PR_CHECK_VALUE(t.size(1) <= kMaxTextureSide && t.size(2) <= kMaxTextureSide, kMipOp, ": ", name, " of shape ",
                 shape_str(t), " exceeds the limit of ", kMaxTextureSide, " texels per side");
}

// [B, h, w, C] -> the next mip level [B, mip_size(h), mip_size(w), C].
Tensor texture_mip_down(const Tensor& level) {
  check_level("level", level);
  // A level with no texels has no level below it (mip_size would invent one texel to read from nothing).
  PR_CHECK_VALUE(level.size(1) > 0 && level.size(2) > 0, kMipOp, ": level of shape ", shape_str(level),
                 " has no texels to halve");
  const int h = (int)level.size(1), w = (int)level.size(2), C = (int)level.size(3);
  check_host_memory(kMipOp, level, bytes_of({level.size(0), mip_size(h), mip_size(w), level.size(3)}),
                    "use a smaller texture or batch");
  auto out = new_output(kOp, level, {level.size(0), mip_size(h), mip_size(w), C});
  if (out.numel() == 0) return out;
  const float* src = data<float>(level);
  float* dst = data<float>(out);
  run_on_device(
      kMipOp, level, [&] { kernels::cpu("mip_down_cpu", MipArgs{src, level.size(0), h, w, C, dst, false}); },
      [&](StreamHandle s) {
        return kernels::cuda("mip_down_cuda", MipArgs{src, level.size(0), h, w, C, dst, false}, s);
      });
  return out;
}

// The adjoint of texture_mip_down: the gradient of a level [B, h, w, C] from that of the level built from it
// ([B, mip_size(h), mip_size(w), C]). A new tensor, so that the op is functional (and traceable).
Tensor texture_mip_down_adjoint(const Tensor& grad_next, int64_t height, int64_t width) {
  check_level("gradient of the next level", grad_next);
  // The level's size is checked before anything is allocated for it (and before it is narrowed to int).
  PR_CHECK_VALUE(height <= kMaxTextureSide && width <= kMaxTextureSide, kMipOp, ": a level of ", height, " x ", width,
                 " texels exceeds the limit of ", kMaxTextureSide, " texels per side");
  PR_CHECK_VALUE(height > 0 && width > 0 && mip_size((int)height) == grad_next.size(1) &&
                     mip_size((int)width) == grad_next.size(2),
                 kMipOp, ": gradient of the next level has shape ", shape_str(grad_next),
                 ", which is not the level below ", height, " x ", width, " texels");
  const int h = (int)height, w = (int)width, C = (int)grad_next.size(3);
  check_host_memory(kMipOp, grad_next, bytes_of({grad_next.size(0), height, width, grad_next.size(3)}),
                    "use a smaller texture or batch");
  auto grad = new_output(kOp, grad_next, {grad_next.size(0), height, width, C});  // every texel is written once
  if (grad.numel() == 0) return grad;
  const float* next = data<float>(grad_next);
  float* dst = data<float>(grad);
  run_on_device(
      kMipOp, grad, [&] { kernels::cpu("mip_down_adjoint_cpu", MipArgs{next, grad.size(0), h, w, C, dst, false}); },
      [&](StreamHandle s) {
        return kernels::cuda("mip_down_adjoint_cuda", MipArgs{next, grad.size(0), h, w, C, dst, false}, s);
      });
  return grad;
}

// texture_fwd over the mip chain of tex, built here: [out, level 1, level 2, ...], max_mip_level levels at most
// (-1: down to one texel). The levels are returned so that the backward (texture_bwd with fold_mip) can use them.
std::vector<Tensor> texture_fwd_mipped(const Tensor& tex, const Tensor& uv, const OptTensor& uv_da,
                                       const OptTensor& bias, int64_t max_mip_level, int64_t filter, int64_t boundary) {
  PR_CHECK_VALUE(filter == kFilterMipNearest || filter == kFilterMipLinear, kOp,
                 ": texture_fwd_mipped needs a mipmap filter mode, got ", filter);
  PR_CHECK_VALUE(max_mip_level >= -1, kOp, ": max_mip_level must be -1 (all) or >= 0, got ", max_mip_level);
  check_texture(tex, boundary == kBoundaryCube);
  const int64_t faces = tex.numel() / (tex.size(-3) * tex.size(-2) * tex.size(-1));
  std::vector<Tensor> levels;
  // Cube faces are halved like separate 2D textures.
  Tensor level = facade::view(tex, {faces, tex.size(-3), tex.size(-2), tex.size(-1)});
  const auto wanted = [&] { return max_mip_level < 0 || (int64_t)levels.size() < max_mip_level; };
  while (wanted() && std::max(level.size(1), level.size(2)) > 1) {
    level = texture_mip_down(level);
    const bool cube = tex.dim() == 5;
    levels.push_back(cube ? facade::view(level, {tex.size(0), 6, level.size(1), level.size(2), level.size(3)}) : level);
  }
  std::vector<Tensor> result = {texture_sample(tex, uv, uv_da, bias, levels, filter, boundary)};
  result.insert(result.end(), levels.begin(), levels.end());
  return result;
}

}  // namespace
}  // namespace prerast

#ifndef PRERAST_CUDA_LIBRARY
PRERAST_LIBRARY_FRAGMENT(m) {
  m.def(
      "texture_fwd(Tensor tex, Tensor uv, Tensor? uv_da, Tensor? mip_level_bias, Tensor[]? mip, int filter_mode,"
      " int boundary_mode) -> Tensor");
  m.def(
      "texture_bwd(Tensor tex, Tensor uv, Tensor? uv_da, Tensor? mip_level_bias, Tensor[]? mip, int filter_mode,"
      " int boundary_mode, Tensor grad_out, bool fold_mip=False) -> Tensor[]");
  m.def(
      "texture_fwd_mipped(Tensor tex, Tensor uv, Tensor? uv_da, Tensor? mip_level_bias, int max_mip_level,"
      " int filter_mode, int boundary_mode) -> Tensor[]");
  m.def("texture_mip_down(Tensor level) -> Tensor");
  m.def("texture_mip_down_adjoint(Tensor grad_next, SymInt height, SymInt width) -> Tensor");
}
#endif

PRERAST_KERNELS(m) {
  m.impl("texture_fwd", PRERAST_KERNEL(prerast::texture_fwd));
  m.impl("texture_bwd", PRERAST_KERNEL(prerast::texture_bwd));
  m.impl("texture_fwd_mipped", PRERAST_KERNEL(prerast::texture_fwd_mipped));
  m.impl("texture_mip_down", PRERAST_KERNEL(prerast::texture_mip_down));
  m.impl("texture_mip_down_adjoint", PRERAST_KERNEL(prerast::texture_mip_down_adjoint));
}
