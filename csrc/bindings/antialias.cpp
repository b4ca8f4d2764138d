// antialias_fwd / antialias_bwd: validation, allocation and dispatch to the core on CPU or CUDA.
#include "../core/antialias.h"
#include "shading_common.h"

namespace prerast {
namespace {

constexpr const char* kOp = "antialias";

// Checks every input and describes them in an AntialiasArgs (pointers filled in here too).
AntialiasArgs check_inputs(const at::Tensor& color, const at::Tensor& rast, const at::Tensor& pos,
                           const at::Tensor& tri, const at::Tensor& half_edges, const at::Tensor& group_of,
                           const at::Tensor& group_start) {
  check_tensor(kOp, "color", color, at::kFloat, {4});
  check_tensor(kOp, "pos", pos, at::kFloat, {2, 3});
  check_dim(kOp, "pos", pos, pos.dim() - 1, 4);
  check_tensor(kOp, "tri", tri, at::kInt, {2});
  check_dim(kOp, "tri", tri, 1, 3);
  for (auto [name, t] : {std::pair<const char*, const at::Tensor*>{"rast", &rast}, {"pos", &pos}, {"tri", &tri}})
    check_same_device(kOp, name, *t, color, "color");
  const int64_t T = tri.size(0);
  check_rast(kOp, rast, T);
  TORCH_CHECK_VALUE(rast.sizes().slice(0, 3) == color.sizes().slice(0, 3), kOp, ": color has shape ",
                    shape_str(color), " but rast has shape ", shape_str(rast),
                    "; their first three dimensions [N, H, W] must match");
  AntialiasArgs a;
  a.instanced = pos.dim() == 3;
  a.num_images = rast.size(0), a.height = (int)rast.size(1), a.width = (int)rast.size(2);
  a.channels = color.size(3), a.num_vertices = pos.size(pos.dim() - 2), a.num_triangles = T;
  TORCH_CHECK_VALUE(!a.instanced || pos.size(0) == a.num_images, kOp, ": pos of shape ", shape_str(pos), " has ",
                    pos.size(0), " images but rast has ", a.num_images,
                    "; instanced pos needs one image per rast image (or pass pos [V, 4] for range mode)");
  check_indices(kOp, tri, a.num_vertices);
  // The topology table is opaque to users; its shape is what keeps the kernels' reads in bounds.
  const char* what = "topology_hash";
  for (const at::Tensor* t : {&half_edges, &group_of, &group_start}) {
    TORCH_CHECK_TYPE(t->scalar_type() == at::kInt && t->dim() == 1 && t->is_contiguous(), kOp, ": ", what,
                     " is corrupt; build it with antialias_construct_topology_hash(tri)");
    check_same_device(kOp, what, *t, color, "color");
  }
  TORCH_CHECK_VALUE(half_edges.size(0) == 3 * T && group_of.size(0) == 3 * T && group_start.size(0) >= 1 &&
                        group_start.size(0) <= 3 * T + 1,
                    kOp, ": ", what, " was built for ", half_edges.size(0) / 3, " triangles but tri has ", T,
                    "; build it with antialias_construct_topology_hash(tri) for this tri");
  a.color = color.data_ptr<float>();
  a.rast = rast.data_ptr<float>();
  a.pos = pos.data_ptr<float>();
  a.tri = tri.data_ptr<int32_t>();
  a.half_edges = half_edges.data_ptr<int32_t>();
  a.group_of = group_of.data_ptr<int32_t>();
  a.group_start = group_start.data_ptr<int32_t>();
  return a;
}

// Returns (out, crossing): crossing [N, H, W, 2] is kept by autograd for the backward pass.
std::tuple<at::Tensor, at::Tensor> antialias_fwd(const at::Tensor& color, const at::Tensor& rast,
                                                 const at::Tensor& pos, const at::Tensor& tri,
                                                 const at::Tensor& half_edges, const at::Tensor& group_of,
                                                 const at::Tensor& group_start) {
  AntialiasArgs a = check_inputs(color, rast, pos, tri, half_edges, group_of, group_start);
  auto out = at::empty_like(color);
  auto crossing = at::empty({a.num_images, a.height, a.width, 2}, color.options());
  a.out = out.data_ptr<float>();
  a.crossing = crossing.data_ptr<float>();
  if (crossing.numel() == 0) return {out, crossing};
  run_on_device(
      kOp, color, [&] { antialias_forward_cpu(a, torch_parallel_for()); },
      [&](StreamHandle s) { return antialias_forward_cuda(a, s); });
  return {out, crossing};
}

// Returns (grad_color, grad_pos); grad_pos is empty when with_pos is false.
std::tuple<at::Tensor, at::Tensor> antialias_bwd(const at::Tensor& color, const at::Tensor& rast,
                                                 const at::Tensor& pos, const at::Tensor& tri,
                                                 const at::Tensor& half_edges, const at::Tensor& group_of,
                                                 const at::Tensor& group_start, const at::Tensor& crossing,
                                                 const at::Tensor& grad_out, double pos_gradient_boost,
                                                 bool with_pos) {
  AntialiasArgs a = check_inputs(color, rast, pos, tri, half_edges, group_of, group_start);
  check_tensor(kOp, "crossing", crossing, at::kFloat, {4});
  check_tensor(kOp, "grad of out", grad_out, at::kFloat, {4});
  check_same_device(kOp, "crossing", crossing, color, "color");
  check_same_device(kOp, "grad of out", grad_out, color, "color");
  TORCH_CHECK_VALUE(crossing.sizes() == at::IntArrayRef({a.num_images, a.height, a.width, 2}), kOp,
                    ": crossing has shape ", shape_str(crossing), ", expected [N, H, W, 2] of rast");
  TORCH_CHECK_VALUE(grad_out.sizes() == color.sizes(), kOp, ": grad of out has shape ", shape_str(grad_out),
                    ", expected color's ", shape_str(color));
  auto grad_color = at::empty_like(color);
  auto grad_pos = with_pos ? at::zeros_like(pos) : at::empty({0}, pos.options());
  a.crossing = crossing.data_ptr<float>();
  a.grad_out = grad_out.data_ptr<float>();
  a.grad_color = grad_color.data_ptr<float>();
  a.grad_pos = with_pos ? grad_pos.data_ptr<float>() : nullptr;
  a.pos_grad_scale = (float)pos_gradient_boost;
  if (crossing.numel() == 0) return {grad_color, grad_pos};
  run_on_device(
      kOp, color, [&] { antialias_backward_cpu(a, torch_parallel_for(), at::get_num_threads()); },
      [&](StreamHandle s) { return antialias_backward_cuda(a, s); });
  return {grad_color, grad_pos};
}

}  // namespace
}  // namespace prerast

TORCH_LIBRARY_FRAGMENT(prerast, m) {
  m.def("antialias_fwd(Tensor color, Tensor rast, Tensor pos, Tensor tri, Tensor half_edges, Tensor group_of,"
        " Tensor group_start) -> (Tensor, Tensor)");
  m.def("antialias_bwd(Tensor color, Tensor rast, Tensor pos, Tensor tri, Tensor half_edges, Tensor group_of,"
        " Tensor group_start, Tensor crossing, Tensor grad_out, float pos_gradient_boost, bool with_pos)"
        " -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(prerast, CPU, m) {
  m.impl("antialias_fwd", &prerast::antialias_fwd);
  m.impl("antialias_bwd", &prerast::antialias_bwd);
}

#ifdef PRERAST_WITH_CUDA
TORCH_LIBRARY_IMPL(prerast, CUDA, m) {
  m.impl("antialias_fwd", &prerast::antialias_fwd);
  m.impl("antialias_bwd", &prerast::antialias_bwd);
}
#endif
