#pragma once
// The precision of the device model's matrix products (device_products.hpp): fp32, or operands
// rounded to bf16 (as PyTorch's bf16 autocast rounds them) and summed in fp32 on tensor cores.

namespace gpt {

enum class ProductPrecision { fp32, bf16 };

inline const char* to_string(ProductPrecision p) noexcept {
  return p == ProductPrecision::bf16 ? "bf16" : "fp32";
}

} // namespace gpt
