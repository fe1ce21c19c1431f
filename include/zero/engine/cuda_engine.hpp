#pragma once
// The engine over CudaStreamSpace (docs/gpu-engine.md): engine.hpp with the CUDA kernels its
// stores call through the space (the fused optimizer steps, fp32 and 8-bit; the gradients' checks
// and norm; the casts and run tables come with the space). A trainer placing states in zero::cuda
// includes this header and links zero::cuda.

// First, so that a build without CUDA hears about this header rather than one it includes.
#include "zero/core/platform.hpp"

#if !ZERO_HAS_CUDA
#error "zero/engine/cuda_engine.hpp needs the CUDA backend: link zero::cuda"
#endif

#include "zero/core/cuda_stream_space.hpp"
#include "zero/engine/engine.hpp"
#include "zero/optim/cuda_quantized_step.hpp"
#include "zero/optim/cuda_stream_step.hpp"
#include "zero/precision/cuda_stream_checks.hpp"
