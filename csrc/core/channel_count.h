// The CPU loops' channel count as a compile-time constant where it is small, so that the compiler keeps a pixel's
// channels in registers and unrolls their loops (texture and antialias compile their pixel functions per count).
#pragma once

#include <cstdint>
#include <type_traits>

namespace prerast {

// run(std::integral_constant<int, C>()) with C = channels for 1 to 4 channels, else C = 0 (any count: the pixel
// functions then loop over the channels they are given).
template <class Run>
void with_channels(int64_t channels, Run run) {
  switch (channels) {
    case 1:
      return run(std::integral_constant<int, 1>());
    case 2:
      return run(std::integral_constant<int, 2>());
    case 3:
      return run(std::integral_constant<int, 3>());
    case 4:
      return run(std::integral_constant<int, 4>());
    default:
      return run(std::integral_constant<int, 0>());
  }
}

}  // namespace prerast
