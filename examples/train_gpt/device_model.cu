// The device model on a GPU: DeviceModel<CudaStreamSpace>, its kernels launched by
// zero/core/cuda_for_each.cuh (a thread per index) and row_kernels.cuh (a warp per row), made
// here for code the host compiler builds (device_model.hpp).

#include <zero/core/cuda_for_each.cuh>

#include "row_kernels.cuh" // before DeviceModel is instantiated: its rows a warp each

#include "device_model.hpp"

#include <cstddef>
#include <memory>

namespace gpt {

std::unique_ptr<AnyDeviceModel> make_device_model(const zero::CudaStreamSpace& space,
                                                  const Config& config, std::size_t max_batch,
                                                  ProductPrecision precision) {
  return std::make_unique<DeviceModel<zero::CudaStreamSpace>>(space, config, max_batch, precision);
}

} // namespace gpt
