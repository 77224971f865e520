// Does a cuBLASLt GEMM honour a programmatic (PDL) edge?
//
// Build (here, no GPU needed):
//   nvcc -O2 -std=c++20 -gencode arch=compute_90a,code=sm_90a -I. -Ilib -o cublaslt_pdl_probe \
//        bench/probes/cublaslt_pdl_probe.cu -lcublasLt -lcublas
//
// A producer kernel triggers its dependents at once, spins ~50 us, then writes x; the
// GEMM y = x w^T follows on an edge made programmatic at capture
// (cudaStreamUpdateCaptureDependencies). If cuBLASLt's kernel waits (griddepcontrol.wait) the
// result equals the one over ordinary edges; if it does not, it reads the stale x (zeros).
// Measured on the H100 with cuBLASLt 13 (bench/NOTES.md, thirty-third session): every output
// differs at every shape, m = 16-256: its kernels do not wait, so a programmatic edge into them
// is a race, and what PDL could save before them is not to be had.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cuda_check.h"  // CUDA_CHECK, CUBLAS_CHECK (failures throw nvllm::Error)

using bf16 = __nv_bfloat16;

__global__ void producer(bf16* x, int count, long long spin) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x)
    x[i] = __float2bfloat16(float((i * 7) % 13 - 6) / 8.f);
}

struct Lt {
  cublasLtHandle_t h;
  void* ws;
  size_t ws_bytes = 32 << 20;
  Lt() {
    CUBLAS_CHECK(cublasLtCreate(&h));
    CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  }
  // y [m, n] = x [m, k] w [n, k]^T, the runner's TN form.
  void mm(const bf16* x, const bf16* w, bf16* y, int m, int n, int k, cudaStream_t s) {
    cublasLtMatmulDesc_t op;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtMatrixLayout_t a, b, c;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, n, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, m, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, n, m, n));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, a, b, c, c, pref, 1, &r, &found));
    const float alpha = 1.f, beta = 0.f;
    CUBLAS_CHECK(cublasLtMatmul(h, op, &alpha, w, a, x, b, &beta, y, c, y, c, &r.algo, ws, ws_bytes, s));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(op);
  }
};

template <typename... A>
void launch_pdl(void (*k)(A...), int grid, int block, cudaStream_t s, A... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, k, args...));
}

// While capturing: make the edges from the current capture frontier (the last kernel) to the next
// node programmatic, as a PDL launch attribute would.
void next_edge_programmatic(cudaStream_t s) {
  cudaStreamCaptureStatus st;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* data = nullptr;
  size_t n = 0;
  CUDA_CHECK(cudaStreamGetCaptureInfo(s, &st, nullptr, nullptr, &deps, &data, &n));
  std::vector<cudaGraphNode_t> d(deps, deps + n);
  std::vector<cudaGraphEdgeData> e(n);
  for (auto& x : e) {
    x = {};
    x.from_port = cudaGraphKernelNodePortProgrammatic;
    x.type = cudaGraphDependencyTypeProgrammatic;
  }
  CUDA_CHECK(cudaStreamUpdateCaptureDependencies(s, d.data(), e.data(), n, cudaStreamSetCaptureDependencies));
}

std::vector<float> to_host(const bf16* p, size_t n) {
  std::vector<bf16> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

void fill(bf16* p, size_t n, unsigned seed) {
  std::vector<bf16> h(n);
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    h[i] = __float2bfloat16(float(int(seed >> 9) % 2001 - 1000) / 16000.f);
  }
  CUDA_CHECK(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice));
}

int safety(Lt& lt, cudaStream_t s, int m, int n, int k, bool programmatic) {
  bf16 *x, *w, *y;
  CUDA_CHECK(cudaMalloc(&x, size_t(m) * k * 2));
  CUDA_CHECK(cudaMalloc(&w, size_t(n) * k * 2));
  CUDA_CHECK(cudaMalloc(&y, size_t(m) * n * 2));
  fill(w, size_t(n) * k, 1);
  std::vector<float> ref;
  int bad = 0;
  for (int pass = 0; pass < 2; ++pass) {  // pass 0: ordinary edge (the reference), 1: as asked
    CUDA_CHECK(cudaMemset(x, 0, size_t(m) * k * 2));
    CUDA_CHECK(cudaMemset(y, 0, size_t(m) * n * 2));
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    launch_pdl(producer, 1, 256, s, x, m * k, 100000LL);  // ~55 us at 1.8 GHz
    if (pass == 1 && programmatic) next_edge_programmatic(s);
    lt.mm(x, w, y, m, n, k, s);
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge;
    CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    CUDA_CHECK(cudaGraphLaunch(ge, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    auto out = to_host(y, size_t(m) * n);
    if (pass == 0) {
      ref = out;
    } else {
      for (size_t i = 0; i < out.size(); ++i) bad += out[i] != ref[i];
    }
    size_t nodes = 0;
    CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
    if (pass == 1) std::printf("  graph nodes %zu\n", nodes);
    CUDA_CHECK(cudaGraphExecDestroy(ge));
    CUDA_CHECK(cudaGraphDestroy(g));
  }
  double sum = 0;
  for (float v : ref) sum += std::fabs(v);
  std::printf("safety m=%d n=%d k=%d programmatic=%d: %d of %zu outputs differ from the ordinary edge (ref |y| sum %.3f)\n",
              m, n, k, int(programmatic), bad, ref.size(), sum);
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
  return bad;
}

int main() {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s\n", prop.name);
  Lt lt;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int bad = 0;
  const int shapes[][2] = {{4096, 1024}, {1024, 3072}, {6144, 4096}, {4096, 14336}};
  for (int m : {16, 64, 128, 256})
    for (const auto& p : shapes) bad += safety(lt, s, m, p[0], p[1], true);
  std::printf("SAFETY %s\n", bad == 0 ? "the GEMMs waited on every programmatic edge" : "GEMMS READ STALE INPUTS");
  return 0;
}
