// The one place that reads the CUDA runner's NVLLM_* timing switches from the environment.
#pragma once

#include "runtime/cuda/cuda_tuning.h"

namespace nvllm {

// CudaTuning as the CLI runs: the defaults, chaining on, then each NVLLM_* variable that is set.
CudaTuning cuda_tuning_from_env();

}  // namespace nvllm
