// interpolate_fwd / interpolate_bwd: validation, allocation and dispatch to the core on CPU or CUDA.
#include "../core/interpolate.h"
#include "../core/upload.h"
#include "shading_common.h"

namespace prerast {
namespace {

constexpr const char* kOp = "interpolate";

// The checked inputs of either op, described for the core; diff_idx holds the listed attribute indices as an
// int32 tensor on the op's device, where the kernels read them.
struct Inputs {
  InterpArgs a;
  Tensor diff_idx;
};

// The listed attribute indices as an int32 tensor on attr's device (on a GPU through a kernel launch, which
// neither waits for the GPU nor breaks a CUDA graph capture).
Tensor upload_indices(const Tensor& attr, const IntListArg& diff) {
  const int64_t n = (int64_t)diff.size();
  std::vector<int32_t> host(diff.begin(), diff.end());
  Tensor idx = allocate(kOp, attr, {n}, Dtype::Int);
  if (n == 0) return idx;
  run_on_device(
      kOp, attr, [&] { std::copy(host.begin(), host.end(), data<int32_t>(idx)); },
      [&](StreamHandle s) {
        return kernels::cuda("upload_int32_cuda", UploadArgs{host.data(), n, data<int32_t>(idx)}, s);
      });
  return idx;
}

Inputs check_inputs(const Tensor& attr, const Tensor& rast, const Tensor& tri, const OptTensor& rast_db,
                    const IntListArg& diff) {
  check_tensor(kOp, "attr", attr, Dtype::Float, {2, 3});
  check_tensor(kOp, "tri", tri, Dtype::Int, {2});
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
    PR_CHECK_VALUE(attr.size(0) == N || attr.size(0) == 1, kOp, ": attr of shape ", shape_str(attr), " has ",
                   attr.size(0), " images but rast has ", N,
                   "; instanced attr needs one image per rast image, or 1 to share it");
    a.attr_per_image = attr.size(0) == N && N > 1;
  }
  check_indices(kOp, tri, a.num_vertices, "attr");
  if (rast_db.has_value()) {
    check_tensor(kOp, "rast_db", *rast_db, Dtype::Float, {4});
    check_same_device(kOp, "rast_db", *rast_db, attr, "attr");
    PR_CHECK_VALUE(sizes(*rast_db) == sizes(rast), kOp, ": rast_db has shape ", shape_str(*rast_db),
                   " but rast has shape ", shape_str(rast), "; they must match");
    a.num_diff = (int64_t)diff.size();
  }
  for (size_t k = 0; k < diff.size(); ++k)
    PR_CHECK_INDEX(diff[k] >= 0 && diff[k] < a.num_attrs, kOp, ": diff_attrs[", k, "] = ", diff[k],
                   " is not an attribute index: attr has ", a.num_attrs, " attributes (0..", a.num_attrs - 1, ")");
  Inputs in{a, upload_indices(attr, diff)};
  in.a.attr = data<float>(attr);
  in.a.rast = data<float>(rast);
  in.a.rast_db = a.num_diff ? data<float>(*rast_db) : nullptr;
  in.a.tri = data<int32_t>(tri);
  in.a.diff = data<int32_t>(in.diff_idx);
  return in;
}

std::tuple<Tensor, Tensor> interpolate_fwd(const Tensor& attr, const Tensor& rast, const Tensor& tri,
                                           const OptTensor& rast_db, const OptIntListArg& diff) {
  Inputs in = check_inputs(attr, rast, tri, rast_db, list_or_empty(diff));
  InterpArgs& a = in.a;
  check_host_memory(kOp, attr, bytes_of({rast.size(0), rast.size(1), rast.size(2), a.num_attrs + 2 * a.num_diff}));
  auto out = new_output(kOp, attr, {rast.size(0), rast.size(1), rast.size(2), a.num_attrs});
  auto out_da = new_output(kOp, attr, {rast.size(0), rast.size(1), rast.size(2), 2 * a.num_diff});
  a.out = data<float>(out);
  a.out_da = a.num_diff ? data<float>(out_da) : nullptr;
  if (a.num_pixels == 0) return {out, out_da};
  run_on_device(
      kOp, attr, [&] { kernels::cpu("interpolate_forward_cpu", a); },
      [&](StreamHandle s) {
        const char* err = check_on_device(a.tri, a.num_triangles, a.num_vertices, a.rast, a.num_pixels, s);
        return err ? err : kernels::cuda("interpolate_forward_cuda", a, s);
      });
  return {out, out_da};
}

// Returns (grad_attr, grad_rast, grad_rast_db); grad_rast_db is empty when no derivatives were output.
std::tuple<Tensor, Tensor, Tensor> interpolate_bwd(const Tensor& attr, const Tensor& rast, const Tensor& tri,
                                                   const OptTensor& rast_db, const OptIntListArg& diff,
                                                   const Tensor& grad_out, const OptTensor& grad_da) {
  Inputs in = check_inputs(attr, rast, tri, rast_db, list_or_empty(diff));
  InterpArgs& a = in.a;
  const std::vector<int64_t> out_shape = {rast.size(0), rast.size(1), rast.size(2), a.num_attrs};
  check_tensor(kOp, "grad of out", grad_out, Dtype::Float, {4});
  check_same_device(kOp, "grad of out", grad_out, attr, "attr");
  PR_CHECK_VALUE(sizes(grad_out) == out_shape, kOp, ": grad of out has shape ", shape_str(grad_out),
                 ", expected the output's shape");
  const bool with_da = a.num_diff > 0 && grad_da.has_value();
  if (with_da) {
    check_tensor(kOp, "grad of out_da", *grad_da, Dtype::Float, {4});
    check_same_device(kOp, "grad of out_da", *grad_da, attr, "attr");
    PR_CHECK_VALUE(has_shape(*grad_da, {rast.size(0), rast.size(1), rast.size(2), 2 * a.num_diff}), kOp,
                   ": grad of out_da has shape ", shape_str(*grad_da), ", expected the output's shape");
  }
  check_host_memory(kOp, attr, bytes_of({attr.numel()}) + bytes_of({rast.numel()}) * (a.num_diff ? 2 : 1));
  auto grad_attr = gradient_like(kOp, attr);
  auto grad_rast = new_output(kOp, rast, sizes(rast));
  auto grad_db = new_output(kOp, attr, a.num_diff ? sizes(*rast_db) : std::vector<int64_t>{0});
  a.grad_out = data<float>(grad_out);
  a.grad_da = with_da ? data<float>(*grad_da) : nullptr;
  a.grad_attr = data<float>(grad_attr);
  a.grad_rast = data<float>(grad_rast);
  a.grad_db = a.num_diff ? data<float>(grad_db) : nullptr;
  if (a.num_pixels > 0) {
    run_on_device(
        kOp, attr, [&] { kernels::cpu("interpolate_backward_cpu", a); },
        [&](StreamHandle s) {
          const char* err = check_on_device(a.tri, a.num_triangles, a.num_vertices, a.rast, a.num_pixels, s);
          TensorWorkspace ws{kOp, attr, {}};
          return err ? err : kernels::cuda("interpolate_backward_cuda", a, s, ws);
        });
  }
  return {grad_attr, grad_rast, grad_db};
}

}  // namespace
}  // namespace prerast

#ifndef PRERAST_CUDA_LIBRARY
PRERAST_LIBRARY_FRAGMENT(m) {
  m.def("interpolate_fwd(Tensor attr, Tensor rast, Tensor tri, Tensor? rast_db, int[]? diff) -> (Tensor, Tensor)");
  m.def(
      "interpolate_bwd(Tensor attr, Tensor rast, Tensor tri, Tensor? rast_db, int[]? diff, Tensor grad_out,"
      " Tensor? grad_da) -> (Tensor, Tensor, Tensor)");
}
#endif

PRERAST_KERNELS(m) {
  m.impl("interpolate_fwd", PRERAST_KERNEL(prerast::interpolate_fwd));
  m.impl("interpolate_bwd", PRERAST_KERNEL(prerast::interpolate_bwd));
}
