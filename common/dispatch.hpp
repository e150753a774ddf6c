// From a run-time head dimension to a kernel instantiated for it.
//
//   ladder::dispatch_head_dim<64, 128>(shape.head_dim, [&]<int kHeadDim>() {
//     launch_tile<Tile<kHeadDim>>(args, stream);
//   });
//
// Kernels are templates on D (register arrays must have compile-time sizes); a D with no
// instantiation is a std::invalid_argument that names the ones there are. The registry's
// for_head_dims() refuses such shapes before a launch, so reaching the throw is a registration bug.
#pragma once

#include <stdexcept>
#include <string>

namespace ladder {

template <int... kDims, class F>
void dispatch_head_dim(int head_dim, F&& body) {
  const bool matched = ((head_dim == kDims ? (body.template operator()<kDims>(), true) : false) || ...);
  if (!matched) {
    std::string list;
    ((list += (list.empty() ? "" : ", ") + std::to_string(kDims)), ...);
    throw std::invalid_argument("head dimension " + std::to_string(head_dim) +
                                " has no kernel instantiated (instantiated: " + list + ")");
  }
}

}  // namespace ladder
