// antialias_fwd / antialias_bwd: validation, allocation and dispatch to the core on CPU or CUDA.
#include "../core/antialias.h"
#include "shading_common.h"

namespace prerast {
namespace {

constexpr const char* kOp = "antialias";

// [N, H, W] of an image-shaped tensor.
std::vector<int64_t> first3(const Tensor& t) { return {t.size(0), t.size(1), t.size(2)}; }

// The topology tables' contents bound every read through them: group_of[h] indexes group_start, whose
// entries slice half_edges, whose entries are half-edge numbers. Read here for CPU tensors; on a GPU the op
// checks them on the device ahead of its kernels (check_inputs_on_device), without a host sync.
void check_topology_contents(int64_t T, const Tensor& half_edges, const Tensor& group_of, const Tensor& group_start) {
  const int64_t groups = group_start.size(0) - 1;
  const struct {
    const char* name;
    const Tensor* t;
    int64_t bound;  // values in [0, bound)
  } tables[] = {
      {"half_edges", &half_edges, 3 * T}, {"group_of", &group_of, groups}, {"group_start", &group_start, 3 * T + 1}};
  for (const auto& table : tables) {
    if (table.t->numel() == 0) continue;
    const Range<int32_t> r = value_range<int32_t>(*table.t);
    PR_CHECK_INDEX(r.lo >= 0 && r.hi < table.bound, kOp, ": topology_hash is corrupt (its ", table.name,
                   " holds values in [", r.lo, ", ", r.hi, "], outside [0, ", table.bound,
                   ")); build it with antialias_construct_topology_hash(tri)");
  }
}

// The CUDA half of the checks of tri, rast's IDs and the topology tables, queued ahead of the op's kernels.
const char* check_inputs_on_device(const AntialiasArgs& a, int64_t group_start_size, StreamHandle s) {
  const int64_t T = a.num_triangles, pixels = a.num_images * a.height * a.width;
  if (const char* err = check_on_device(a.tri, T, a.num_vertices, a.rast, pixels, s)) return err;
  if (const char* err = kernels::cuda("check_topology_table_cuda", IndexCheckArgs{a.half_edges, 3 * T, 3 * T}, s))
    return err;
  if (const char* err =
          kernels::cuda("check_topology_table_cuda", IndexCheckArgs{a.group_of, 3 * T, group_start_size - 1}, s))
    return err;
  return kernels::cuda("check_topology_table_cuda", IndexCheckArgs{a.group_start, group_start_size, 3 * T + 1}, s);
}

// Checks every input and describes them in an AntialiasArgs (pointers filled in here too).
AntialiasArgs check_inputs(const Tensor& color, const Tensor& rast, const Tensor& pos, const Tensor& tri,
                           const Tensor& half_edges, const Tensor& group_of, const Tensor& group_start) {
  check_tensor(kOp, "color", color, Dtype::Float, {4});
  check_tensor(kOp, "pos", pos, Dtype::Float, {2, 3});
  check_dim(kOp, "pos", pos, pos.dim() - 1, 4);
  check_tensor(kOp, "tri", tri, Dtype::Int, {2});
  check_dim(kOp, "tri", tri, 1, 3);
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"rast", &rast}, {"pos", &pos}, {"tri", &tri}})
    check_same_device(kOp, name, *t, color, "color");
  const int64_t T = tri.size(0);
  check_rast(kOp, rast, T);
  PR_CHECK_VALUE(first3(rast) == first3(color), kOp, ": color has shape ", shape_str(color), " but rast has shape ",
                 shape_str(rast), "; their first three dimensions [N, H, W] must match");
  AntialiasArgs a;
  a.instanced = pos.dim() == 3;
  a.num_images = rast.size(0), a.height = (int)rast.size(1), a.width = (int)rast.size(2);
  a.channels = color.size(3), a.num_vertices = pos.size(pos.dim() - 2), a.num_triangles = T;
  PR_CHECK_VALUE(!a.instanced || pos.size(0) == a.num_images, kOp, ": pos of shape ", shape_str(pos), " has ",
                 pos.size(0), " images but rast has ", a.num_images,
                 "; instanced pos needs one image per rast image (or pass pos [V, 4] for range mode)");
  check_indices(kOp, tri, a.num_vertices);
  // The topology table is opaque to users; its shape is what keeps the kernels' reads in bounds.
  const char* what = "topology_hash";
  for (const Tensor* t : {&half_edges, &group_of, &group_start}) {
    PR_CHECK_TYPE(facade::has_dtype(*t, Dtype::Int) && t->dim() == 1 && t->is_contiguous(), kOp, ": ", what,
                  " is corrupt; build it with antialias_construct_topology_hash(tri)");
    check_same_device(kOp, what, *t, color, "color");
  }
  PR_CHECK_VALUE(half_edges.size(0) == 3 * T && group_of.size(0) == 3 * T && group_start.size(0) >= 1 &&
                     group_start.size(0) <= 3 * T + 1,
                 kOp, ": ", what, " was built for ", half_edges.size(0) / 3, " triangles but tri has ", T,
                 "; build it with antialias_construct_topology_hash(tri) for this tri");
  if (color.is_cpu()) check_topology_contents(T, half_edges, group_of, group_start);
  a.color = data<float>(color);
  a.rast = data<float>(rast);
  a.pos = data<float>(pos);
  a.tri = data<int32_t>(tri);
  a.half_edges = data<int32_t>(half_edges);
  a.group_of = data<int32_t>(group_of);
  a.group_start = data<int32_t>(group_start);
  return a;
}

// Returns (out, crossing): crossing [N, H, W, 2] is kept by autograd for the backward pass. pos_gradient_boost
// is for the backward only: an argument of the forward so that the autograd registered on this op sees it.
std::tuple<Tensor, Tensor> antialias_fwd(const Tensor& color, const Tensor& rast, const Tensor& pos, const Tensor& tri,
                                         const Tensor& half_edges, const Tensor& group_of, const Tensor& group_start,
                                         double pos_gradient_boost) {
  (void)pos_gradient_boost;
  AntialiasArgs a = check_inputs(color, rast, pos, tri, half_edges, group_of, group_start);
  check_host_memory(kOp, color, bytes_of({color.numel()}) + bytes_of({rast.size(0), rast.size(1), rast.size(2), 2}));
  auto out = empty_like_float(kOp, color);
  auto crossing = new_output(kOp, color, {a.num_images, a.height, a.width, 2});
  a.out = data<float>(out);
  a.crossing = data<float>(crossing);
  if (crossing.numel() == 0) return {out, crossing};
  run_on_device(
      kOp, color, [&] { kernels::cpu("antialias_forward_cpu", a); },
      [&](StreamHandle s) {
        const char* err = check_inputs_on_device(a, group_start.size(0), s);
        return err ? err : kernels::cuda("antialias_forward_cuda", a, s);
      });
  return {out, crossing};
}

// Returns (grad_color, grad_pos); grad_pos is empty when with_pos is false.
std::tuple<Tensor, Tensor> antialias_bwd(const Tensor& color, const Tensor& rast, const Tensor& pos, const Tensor& tri,
                                         const Tensor& half_edges, const Tensor& group_of, const Tensor& group_start,
                                         const Tensor& crossing, const Tensor& grad_out, double pos_gradient_boost,
                                         bool with_pos) {
  AntialiasArgs a = check_inputs(color, rast, pos, tri, half_edges, group_of, group_start);
  check_tensor(kOp, "crossing", crossing, Dtype::Float, {4});
  check_tensor(kOp, "grad of out", grad_out, Dtype::Float, {4});
  check_same_device(kOp, "crossing", crossing, color, "color");
  check_same_device(kOp, "grad of out", grad_out, color, "color");
  PR_CHECK_VALUE(has_shape(crossing, {a.num_images, a.height, a.width, 2}), kOp, ": crossing has shape ",
                 shape_str(crossing), ", expected [N, H, W, 2] of rast");
  PR_CHECK_VALUE(sizes(grad_out) == sizes(color), kOp, ": grad of out has shape ", shape_str(grad_out),
                 ", expected color's ", shape_str(color));
  check_host_memory(kOp, color, bytes_of({color.numel()}) + (with_pos ? bytes_of({pos.numel()}) : 0.0));
  auto grad_color = empty_like_float(kOp, color);
  auto grad_pos = with_pos ? gradient_like(kOp, pos) : allocate(kOp, pos, {0}, Dtype::Float);
  a.crossing = data<float>(crossing);
  a.grad_out = data<float>(grad_out);
  a.grad_color = data<float>(grad_color);
  a.grad_pos = with_pos ? data<float>(grad_pos) : nullptr;
  a.pos_grad_scale = (float)pos_gradient_boost;
  if (crossing.numel() == 0) return {grad_color, grad_pos};
  run_on_device(
      kOp, color, [&] { kernels::cpu("antialias_backward_cpu", a); },
      [&](StreamHandle s) {
        const char* err = check_inputs_on_device(a, group_start.size(0), s);
        TensorWorkspace ws{kOp, color, {}};
        return err ? err : kernels::cuda("antialias_backward_cuda", a, s, ws);
      });
  return {grad_color, grad_pos};
}

}  // namespace
}  // namespace prerast

#ifndef PRERAST_CUDA_LIBRARY
PRERAST_LIBRARY_FRAGMENT(m) {
  m.def(
      "antialias_fwd(Tensor color, Tensor rast, Tensor pos, Tensor tri, Tensor half_edges, Tensor group_of,"
      " Tensor group_start, float pos_gradient_boost=1.0) -> (Tensor, Tensor)");
  m.def(
      "antialias_bwd(Tensor color, Tensor rast, Tensor pos, Tensor tri, Tensor half_edges, Tensor group_of,"
      " Tensor group_start, Tensor crossing, Tensor grad_out, float pos_gradient_boost, bool with_pos)"
      " -> (Tensor, Tensor)");
}
#endif

PRERAST_KERNELS(m) {
  m.impl("antialias_fwd", PRERAST_KERNEL(prerast::antialias_fwd));
  m.impl("antialias_bwd", PRERAST_KERNEL(prerast::antialias_bwd));
}
