// The one place that reads the CUDA runner's NVLLM_* timing switches from the environment.
#pragma once

#include "runtime/cuda/cuda_tuning.h"

namespace nvllm {

// CudaTuning as the CLI runs: the defaults, chaining on, then each NVLLM_* variable that is set.
CudaTuning cuda_tuning_from_env();
// CudaRunnerOptions::gemv_max_batch for A/B timing of the gemv / cuBLASLt line: NVLLM_GEMV_MAX_BATCH
// where it is a positive integer, else `fallback`.
int gemv_max_batch_from_env(int fallback);

}  // namespace nvllm
