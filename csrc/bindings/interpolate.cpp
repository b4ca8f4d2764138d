// interpolate_fwd / interpolate_bwd: validation, allocation and dispatch to the core on CPU or CUDA.
#include "../core/interpolate.h"
#include "shading_common.h"

namespace prerast {
namespace {

constexpr const char* kOp = "interpolate";
// Per-chunk gradient buffers of the CPU backward may use at most this much memory beyond grad_attr itself.
constexpr int64_t kMaxChunkBytes = 256ll << 20;

// Checks every input and describes them in an InterpArgs (pointers are filled in by the callers).
InterpArgs check_inputs(const at::Tensor& attr, const at::Tensor& rast, const at::Tensor& tri,
                        const c10::optional<at::Tensor>& rast_db, at::IntArrayRef diff) {
  check_tensor(kOp, "attr", attr, at::kFloat, {2, 3});
  check_tensor(kOp, "tri", tri, at::kInt, {2});
  check_dim(kOp, "tri", tri, 1, 3);
  check_same_device(kOp, "rast", rast, attr, "attr");
  check_same_device(kOp, "tri", tri, attr, "attr");
  check_rast(kOp, rast, tri.size(0));
  InterpArgs a;
  const int64_t N = rast.size(0);
  a.pixels_per_image = rast.size(1) * rast.size(2);
  a.num_pixels = N * a.pixels_per_image;
  a.num_vertices = attr.size(attr.dim() - 2);
  a.num_attrs = attr.size(attr.dim() - 1);
  a.num_triangles = tri.size(0);
  if (attr.dim() == 3) {
    TORCH_CHECK_VALUE(attr.size(0) == N || attr.size(0) == 1, kOp, ": attr of shape ", shape_str(attr),
                      " has ", attr.size(0), " images but rast has ", N,
                      "; instanced attr needs one image per rast image, or 1 to share it");
    a.attr_per_image = attr.size(0) == N && N > 1;
  }
  check_indices(kOp, tri, a.num_vertices, "attr");
  if (rast_db.has_value()) {
    check_tensor(kOp, "rast_db", *rast_db, at::kFloat, {4});
    check_same_device(kOp, "rast_db", *rast_db, attr, "attr");
    TORCH_CHECK_VALUE(rast_db->sizes() == rast.sizes(), kOp, ": rast_db has shape ", shape_str(*rast_db),
                      " but rast has shape ", shape_str(rast), "; they must match");
    a.num_diff = (int64_t)diff.size();
  }
  for (size_t k = 0; k < diff.size(); ++k)
    TORCH_CHECK_INDEX(diff[k] >= 0 && diff[k] < a.num_attrs, kOp, ": diff_attrs[", k, "] = ", diff[k],
                      " is not an attribute index: attr has ", a.num_attrs, " attributes (0..", a.num_attrs - 1, ")");
  return a;
}

// The listed attribute indices as an int32 tensor on the op's device (the kernels read them from there).
at::Tensor diff_tensor(at::IntArrayRef diff, const at::Tensor& like) {
  auto host = at::empty({(int64_t)diff.size()}, at::TensorOptions().dtype(at::kInt));
  for (size_t k = 0; k < diff.size(); ++k) host.data_ptr<int32_t>()[k] = (int32_t)diff[k];
  return host.to(like.device());
}

std::tuple<at::Tensor, at::Tensor> interpolate_fwd(const at::Tensor& attr, const at::Tensor& rast,
                                                   const at::Tensor& tri, const c10::optional<at::Tensor>& rast_db,
                                                   at::IntArrayRef diff) {
  InterpArgs a = check_inputs(attr, rast, tri, rast_db, diff);
  auto out = at::empty({rast.size(0), rast.size(1), rast.size(2), a.num_attrs}, attr.options());
  auto out_da = at::empty({rast.size(0), rast.size(1), rast.size(2), 2 * a.num_diff}, attr.options());
  auto diff_idx = diff_tensor(diff, attr);
  a.attr = attr.data_ptr<float>();
  a.rast = rast.data_ptr<float>();
  a.rast_db = a.num_diff ? rast_db->data_ptr<float>() : nullptr;
  a.tri = tri.data_ptr<int32_t>();
  a.diff = diff_idx.data_ptr<int32_t>();
  a.out = out.data_ptr<float>();
  a.out_da = a.num_diff ? out_da.data_ptr<float>() : nullptr;
  if (a.num_pixels == 0) return {out, out_da};
  run_on_device(
      kOp, attr, [&] { interpolate_forward_cpu(a, torch_parallel_for()); },
      [&](StreamHandle s) { return interpolate_forward_cuda(a, s); });
  return {out, out_da};
}

// Returns (grad_attr, grad_rast, grad_rast_db); grad_rast_db is empty when no derivatives were output.
std::tuple<at::Tensor, at::Tensor, at::Tensor> interpolate_bwd(const at::Tensor& attr, const at::Tensor& rast,
                                                               const at::Tensor& tri,
                                                               const c10::optional<at::Tensor>& rast_db,
                                                               at::IntArrayRef diff, const at::Tensor& grad_out,
                                                               const c10::optional<at::Tensor>& grad_da) {
  InterpArgs a = check_inputs(attr, rast, tri, rast_db, diff);
  const std::vector<int64_t> out_shape = {rast.size(0), rast.size(1), rast.size(2), a.num_attrs};
  check_tensor(kOp, "grad of out", grad_out, at::kFloat, {4});
  check_same_device(kOp, "grad of out", grad_out, attr, "attr");
  TORCH_CHECK_VALUE(grad_out.sizes() == at::IntArrayRef(out_shape), kOp, ": grad of out has shape ",
                    shape_str(grad_out), ", expected the output's shape");
  const bool with_da = a.num_diff > 0 && grad_da.has_value();
  if (with_da) {
    check_tensor(kOp, "grad of out_da", *grad_da, at::kFloat, {4});
    check_same_device(kOp, "grad of out_da", *grad_da, attr, "attr");
    TORCH_CHECK_VALUE(grad_da->sizes() == at::IntArrayRef({rast.size(0), rast.size(1), rast.size(2), 2 * a.num_diff}),
                      kOp, ": grad of out_da has shape ", shape_str(*grad_da), ", expected the output's shape");
  }
  auto grad_attr = at::zeros_like(attr);
  auto grad_rast = at::empty_like(rast);
  auto grad_db = a.num_diff ? at::empty_like(*rast_db) : at::empty({0}, attr.options());
  auto diff_idx = diff_tensor(diff, attr);
  a.attr = attr.data_ptr<float>();
  a.rast = rast.data_ptr<float>();
  a.rast_db = a.num_diff ? rast_db->data_ptr<float>() : nullptr;
  a.tri = tri.data_ptr<int32_t>();
  a.diff = diff_idx.data_ptr<int32_t>();
  a.grad_out = grad_out.data_ptr<float>();
  a.grad_da = with_da ? grad_da->data_ptr<float>() : nullptr;
  a.grad_attr = grad_attr.data_ptr<float>();
  a.grad_rast = grad_rast.data_ptr<float>();
  a.grad_db = a.num_diff ? grad_db.data_ptr<float>() : nullptr;
  if (a.num_pixels > 0) {
    run_on_device(
        kOp, attr, [&] { interpolate_backward_cpu(a, torch_parallel_for(), at::get_num_threads(), kMaxChunkBytes); },
        [&](StreamHandle s) { return interpolate_backward_cuda(a, s); });
  }
  return {grad_attr, grad_rast, grad_db};
}

}  // namespace
}  // namespace prerast

TORCH_LIBRARY_FRAGMENT(prerast, m) {
  m.def("interpolate_fwd(Tensor attr, Tensor rast, Tensor tri, Tensor? rast_db, int[] diff) -> (Tensor, Tensor)");
  m.def("interpolate_bwd(Tensor attr, Tensor rast, Tensor tri, Tensor? rast_db, int[] diff, Tensor grad_out,"
        " Tensor? grad_da) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(prerast, CPU, m) {
  m.impl("interpolate_fwd", &prerast::interpolate_fwd);
  m.impl("interpolate_bwd", &prerast::interpolate_bwd);
}

#ifdef PRERAST_WITH_CUDA
TORCH_LIBRARY_IMPL(prerast, CUDA, m) {
  m.impl("interpolate_fwd", &prerast::interpolate_fwd);
  m.impl("interpolate_bwd", &prerast::interpolate_bwd);
}
#endif
