// Small host arrays (an op's list arguments) copied to the GPU as kernel arguments: a host-to-device copy from
// pageable memory may wait for the GPU and cannot be captured in a CUDA graph; a kernel launch can be.
#pragma once

#include <cstdint>

#include "common.h"

namespace prerast {

struct UploadArgs {  // the kernel library's argument struct
  const int32_t* values;
  int64_t n;
  int32_t* dst;
};

// dst[0..n) = values[0..n) on the device, queued on stream; values may be freed when this returns.
const char* upload_int32_cuda(const int32_t* values, int64_t n, int32_t* dst, StreamHandle stream);

}  // namespace prerast
