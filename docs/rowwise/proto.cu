// Row-wise softmax and RMSNorm prototypes for the coming `softmax` and `rmsnorm` families:
// one block per row, the row kept in shared memory between its reduction and its write, so
// that device memory sees each input byte read once and each output byte written once.
// Built and run on the GPU machine: nvcc -O3 -std=c++17 -arch=sm_90 proto.cu -o proto && ./proto
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cmath>
#include <vector>
#include <algorithm>
#include <random>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(1); } } while (0)

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half(x); }

template <typename T> struct alignas(16) Vec { T e[16 / sizeof(T)]; };

// Block-wide reduction of one float; `op` is max or sum. THREADS a multiple of 32.
template <int THREADS, bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, w) : v + w;
    }
    if (THREADS == 32) return v;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < THREADS / 32 ? scratch[lane] : (MAX ? -INFINITY : 0.f);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, w) : v + w;
    }
    return v;
}

// A row as 16-byte pieces: `head` elements before the first 16-byte boundary, `nvec` whole
// vectors, then the tail.
template <typename T>
struct Split {
    static constexpr int V = 16 / sizeof(T);
    int head, nvec;
    __device__ Split(const void* row, int cols) {
        head = min(cols, int(((16 - (reinterpret_cast<uintptr_t>(row) & 15)) & 15) / sizeof(T)));
        nvec = (cols - head) / V;
    }
};

// The row cached in shared memory as T, element i at cache[i + pad], where pad puts the row's
// 16-byte vectors on 16-byte boundaries of the cache. Loads each element once from global
// memory; f(value) sees every element (for the reduction).
template <typename T, int THREADS, typename F>
__device__ __forceinline__ void load_cached(const T* __restrict__ row, int cols, T* cache, int pad, F f) {
    constexpr int V = 16 / sizeof(T);
    const Split<T> s(row, cols);
    for (int i = threadIdx.x; i < s.head; i += THREADS) { T v = row[i]; cache[i + pad] = v; f(to_f(v)); }
    const uint4* vrow = reinterpret_cast<const uint4*>(row + s.head);
    uint4* vcache = reinterpret_cast<uint4*>(cache + s.head + pad);
    constexpr int U = 4;
    int v = threadIdx.x;
    for (; v + (U - 1) * THREADS < s.nvec; v += U * THREADS) {
        uint4 raw[U];
        #pragma unroll
        for (int u = 0; u < U; ++u) raw[u] = __ldcs(&vrow[v + u * THREADS]);  // streamed: read once
        #pragma unroll
        for (int u = 0; u < U; ++u) {
            vcache[v + u * THREADS] = raw[u];
            const T* e = reinterpret_cast<const T*>(&raw[u]);
            #pragma unroll
            for (int j = 0; j < V; ++j) f(to_f(e[j]));
        }
    }
    for (; v < s.nvec; v += THREADS) {
        uint4 raw = __ldcs(&vrow[v]);
        vcache[v] = raw;
        const T* e = reinterpret_cast<const T*>(&raw);
        #pragma unroll
        for (int j = 0; j < V; ++j) f(to_f(e[j]));
    }
    for (int i = s.head + s.nvec * V + threadIdx.x; i < cols; i += THREADS) { T v = row[i]; cache[i + pad] = v; f(to_f(v)); }
}

// Writes y[i] = g(i, cache value) for the row: 16-byte vectors where y's row is aligned as x's
// was (the cache's vectors then line up), element by element otherwise.
template <typename T, int THREADS, typename G>
__device__ __forceinline__ void store_cached(T* __restrict__ row, int cols, const T* cache, int pad, G g) {
    constexpr int V = 16 / sizeof(T);
    const Split<T> s(row, cols);
    if ((s.head + pad) % V != 0) {
        for (int i = threadIdx.x; i < cols; i += THREADS) row[i] = from_f<T>(g(i, to_f(cache[i + pad])));
        return;
    }
    for (int i = threadIdx.x; i < s.head; i += THREADS) row[i] = from_f<T>(g(i, to_f(cache[i + pad])));
    uint4* vrow = reinterpret_cast<uint4*>(row + s.head);
    const uint4* vcache = reinterpret_cast<const uint4*>(cache + s.head + pad);
    #pragma unroll 4
    for (int v = threadIdx.x; v < s.nvec; v += THREADS) {
        uint4 in = vcache[v], out;
        const T* e = reinterpret_cast<const T*>(&in);
        T* o = reinterpret_cast<T*>(&out);
        #pragma unroll
        for (int j = 0; j < V; ++j) o[j] = from_f<T>(g(s.head + v * V + j, to_f(e[j])));
        __stcs(&vrow[v], out);  // streamed: written once
    }
    for (int i = s.head + s.nvec * V + threadIdx.x; i < cols; i += THREADS) row[i] = from_f<T>(g(i, to_f(cache[i + pad])));
}

template <typename T>
__device__ __forceinline__ int cache_pad(const T* row) {
    constexpr int V = 16 / sizeof(T);
    const int head = int(((16 - (reinterpret_cast<uintptr_t>(row) & 15)) & 15) / sizeof(T));
    return (V - head % V) % V;
}

// Softmax of each row, the row cached in shared memory (cols + 16/sizeof(T) elements).
// Pass 1 (global → cache): the row's max. Pass 2 (cache): e = exp(x - max) written back into
// the cache as T and summed. Pass 3 (cache → global): e / sum. One exponential per element.
template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS) softmax(const T* __restrict__ X, T* __restrict__ Y, int rows, int cols, long ldx, long ldy, int unused) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ float scratch[32];
    T* cache = reinterpret_cast<T*>(smem_raw);
    const int r = blockIdx.x;
    if (r >= rows) return;
    const T* x = X + r * ldx;
    T* y = Y + r * ldy;
    const int pad = cache_pad(x);
    float m = -INFINITY;
    load_cached<T, THREADS>(x, cols, cache, pad, [&](float v) { m = fmaxf(m, v); });
    const float row_max = block_reduce<THREADS, true>(m, scratch);
    const float shift = row_max * 1.4426950408889634f;
    float s = 0.f;
    // Each thread reads back what it wrote: no barrier needed between pass 1 and pass 2 for the
    // vector part, but the head and tail were written by other threads' strides: sync.
    __syncthreads();
    for (int i = threadIdx.x; i < cols; i += THREADS) {
        const float e = exp2f(fmaf(to_f(cache[i + pad]), 1.4426950408889634f, -shift));
        cache[i + pad] = from_f<T>(e);
        s += e;
    }
    const float inv = 1.f / block_reduce<THREADS, false>(s, scratch);
    __syncthreads();
    store_cached<T, THREADS>(y, cols, cache, pad, [&](int, float e) { return e * inv; });
}

// RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w, the row cached in shared memory.
template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS) rmsnorm(const T* __restrict__ X, const T* __restrict__ W, T* __restrict__ Y, int rows, int cols, long ldx, long ldy, float eps, int unused) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ float scratch[32];
    T* cache = reinterpret_cast<T*>(smem_raw);
    const int r = blockIdx.x;
    if (r >= rows) return;
    const T* x = X + r * ldx;
    T* y = Y + r * ldy;
    const int pad = cache_pad(x);
    float ss = 0.f;
    load_cached<T, THREADS>(x, cols, cache, pad, [&](float v) { ss = fmaf(v, v, ss); });
    const float scale = rsqrtf(block_reduce<THREADS, false>(ss, scratch) / cols + eps);
    __syncthreads();
    store_cached<T, THREADS>(y, cols, cache, pad, [&](int i, float v) { return v * scale * to_f(__ldg(&W[i])); });
}

// --- v3: rows split over a thread-block cluster (wide rows), a warp per row (narrow rows) ---

__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
__device__ __forceinline__ unsigned cluster_rank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r)); return r; }
// Reads a float at the same shared-memory offset in block `rank` of the cluster.
__device__ __forceinline__ float remote_load(const float* local, unsigned rank) {
    unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(local)), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
    return v;
}

// The slice of a row that block `rank` of C takes: whole 16-byte vectors' worth of elements.
template <typename T, int C>
__device__ __forceinline__ void slice(int cols, unsigned rank, int& begin, int& len) {
    constexpr int V = 16 / sizeof(T);
    const int per = ((cols + C - 1) / C + V - 1) / V * V;
    begin = min(cols, int(rank) * per);
    len = min(cols, begin + per) - begin;
}

template <typename T, int THREADS, int C>
__global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS) softmax_cluster(const T* __restrict__ X, T* __restrict__ Y, int rows, int cols, long ldx, long ldy, int unused) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ float scratch[32];
    __shared__ float partial[2];
    T* cache = reinterpret_cast<T*>(smem_raw);
    const unsigned rank = cluster_rank();
    const int r = blockIdx.x / C;
    int begin, len;
    slice<T, C>(cols, rank, begin, len);
    const T* x = X + r * ldx + begin;
    T* y = Y + r * ldy + begin;
    const int pad = cache_pad(x);
    float m = -INFINITY;
    load_cached<T, THREADS>(x, len, cache, pad, [&](float v) { m = fmaxf(m, v); });
    m = block_reduce<THREADS, true>(m, scratch);
    if (threadIdx.x == 0) partial[0] = m;
    cluster_arrive();
    cluster_wait();
    float row_max = -INFINITY;
    #pragma unroll
    for (unsigned k = 0; k < C; ++k) row_max = fmaxf(row_max, remote_load(&partial[0], k));
    const float shift = row_max * 1.4426950408889634f;
    float s = 0.f;
    for (int i = threadIdx.x; i < len; i += THREADS) {
        const float e = exp2f(fmaf(to_f(cache[i + pad]), 1.4426950408889634f, -shift));
        cache[i + pad] = from_f<T>(e);
        s += e;
    }
    s = block_reduce<THREADS, false>(s, scratch);
    if (threadIdx.x == 0) partial[1] = s;
    cluster_arrive();
    cluster_wait();
    float sum = 0.f;
    #pragma unroll
    for (unsigned k = 0; k < C; ++k) sum += remote_load(&partial[1], k);
    // No block leaves while another may still read its partials.
    cluster_arrive();
    const float inv = 1.f / sum;
    store_cached<T, THREADS>(y, len, cache, pad, [&](int, float e) { return e * inv; });
    cluster_wait();
}

template <typename T, int THREADS, int C>
__global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS) rmsnorm_cluster(const T* __restrict__ X, const T* __restrict__ W, T* __restrict__ Y, int rows, int cols, long ldx, long ldy, float eps, int unused) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ float scratch[32];
    __shared__ float partial;
    T* cache = reinterpret_cast<T*>(smem_raw);
    const unsigned rank = cluster_rank();
    const int r = blockIdx.x / C;
    int begin, len;
    slice<T, C>(cols, rank, begin, len);
    const T* x = X + r * ldx + begin;
    T* y = Y + r * ldy + begin;
    const T* w = W + begin;
    const int pad = cache_pad(x);
    float ss = 0.f;
    load_cached<T, THREADS>(x, len, cache, pad, [&](float v) { ss = fmaf(v, v, ss); });
    ss = block_reduce<THREADS, false>(ss, scratch);
    if (threadIdx.x == 0) partial = ss;
    cluster_arrive();
    cluster_wait();
    float total = 0.f;
    #pragma unroll
    for (unsigned k = 0; k < C; ++k) total += remote_load(&partial, k);
    cluster_arrive();
    const float scale = rsqrtf(total / cols + eps);
    store_cached<T, THREADS>(y, len, cache, pad, [&](int i, float v) { return v * scale * to_f(__ldg(&w[i])); });
    cluster_wait();
}

// A warp per row, the row in registers: rows of at most 32 * VPL 16-byte vectors, 16-byte
// aligned, whole vectors (the prototype's narrow shapes).
template <typename T, int WARPS, int VPL, bool SOFTMAX>
__global__ void __launch_bounds__(WARPS * 32) rows_warp(const T* __restrict__ X, const T* __restrict__ W, T* __restrict__ Y, int rows, int cols, long ldx, long ldy, float eps, int unused) {
    constexpr int V = 16 / sizeof(T);
    const int lane = threadIdx.x % 32;
    const int r = blockIdx.x * WARPS + threadIdx.x / 32;
    if (r >= rows) return;
    const uint4* x = reinterpret_cast<const uint4*>(X + r * ldx);
    uint4* y = reinterpret_cast<uint4*>(Y + r * ldy);
    const int nvec = cols / V;
    float v[VPL][V];
    uint4 raw[VPL];
    #pragma unroll
    for (int k = 0; k < VPL; ++k) if (lane + k * 32 < nvec) raw[k] = __ldcs(&x[lane + k * 32]);
    float acc = SOFTMAX ? -INFINITY : 0.f;
    #pragma unroll
    for (int k = 0; k < VPL; ++k) {
        const T* e = reinterpret_cast<const T*>(&raw[k]);
        #pragma unroll
        for (int j = 0; j < V; ++j) {
            v[k][j] = lane + k * 32 < nvec ? to_f(e[j]) : (SOFTMAX ? -INFINITY : 0.f);
            acc = SOFTMAX ? fmaxf(acc, v[k][j]) : fmaf(v[k][j], v[k][j], acc);
        }
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) { float w = __shfl_xor_sync(0xffffffffu, acc, o); acc = SOFTMAX ? fmaxf(acc, w) : acc + w; }
    float mul;
    if (SOFTMAX) {
        const float shift = acc * 1.4426950408889634f;
        float s = 0.f;
        #pragma unroll
        for (int k = 0; k < VPL; ++k)
            #pragma unroll
            for (int j = 0; j < V; ++j) { v[k][j] = exp2f(fmaf(v[k][j], 1.4426950408889634f, -shift)); s += v[k][j]; }
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        mul = 1.f / s;
    } else {
        mul = rsqrtf(acc / cols + eps);
    }
    #pragma unroll
    for (int k = 0; k < VPL; ++k) {
        if (lane + k * 32 >= nvec) continue;
        uint4 out, wv;
        if (!SOFTMAX) wv = __ldg(reinterpret_cast<const uint4*>(W) + lane + k * 32);
        const T* we = reinterpret_cast<const T*>(&wv);
        T* o = reinterpret_cast<T*>(&out);
        #pragma unroll
        for (int j = 0; j < V; ++j) o[j] = from_f<T>(SOFTMAX ? v[k][j] * mul : v[k][j] * mul * to_f(we[j]));
        __stcs(&y[lane + k * 32], out);
    }
}

// --- v4: persistent blocks streaming rows through two shared-memory buffers: the bulk copy
// engine (cp.async.bulk) loads row i+1 while row i is reduced and written. With C = 2 a row is
// split over a cluster of two blocks (f32 rows of 50257 need 2 x 100 KB buffers per block). ---

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar) { asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(smem_addr(bar))); }
__device__ __forceinline__ void mbar_expect(uint64_t* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned phase) {
    asm volatile(
        "{\n .reg .pred p;\n WAIT_%=:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra WAIT_%=;\n}\n" :: "r"(smem_addr(bar)), "r"(phase) : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

// Where a slice of a row lies: `head` elements up to the first 16-byte boundary, `nvec`
// vectors, the rest; in the buffer element i sits at [i + pad], vectors on 16-byte boundaries.
struct Layout { int head, nvec, pad; };

template <typename T>
__device__ __forceinline__ Layout layout_of(const T* row, int len) {
    constexpr int V = 16 / sizeof(T);
    Layout l;
    l.head = min(len, int(((16 - (reinterpret_cast<uintptr_t>(row) & 15)) & 15) / sizeof(T)));
    l.nvec = (len - l.head) / V;
    l.pad = (V - l.head % V) % V;
    return l;
}

// f(value) for every element of the cached slice: vectors from shared memory, then the ends.
template <typename T, int THREADS, typename F>
__device__ __forceinline__ void each_cached(const T* buf, const Layout& l, int len, F f) {
    constexpr int V = 16 / sizeof(T);
    const uint4* vbuf = reinterpret_cast<const uint4*>(buf + l.head + l.pad);
    #pragma unroll 4
    for (int v = threadIdx.x; v < l.nvec; v += THREADS) {
        uint4 raw = vbuf[v];
        const T* e = reinterpret_cast<const T*>(&raw);
        #pragma unroll
        for (int j = 0; j < V; ++j) f(to_f(e[j]));
    }
    for (int i = threadIdx.x; i < l.head; i += THREADS) f(to_f(buf[i + l.pad]));
    for (int i = l.head + l.nvec * V + threadIdx.x; i < len; i += THREADS) f(to_f(buf[i + l.pad]));
}

template <typename T, int THREADS, int C, bool SOFTMAX>
__global__ void __launch_bounds__(THREADS) rows_stream(const T* __restrict__ X, const T* __restrict__ W, T* __restrict__ Y, int rows, int cols, long ldx, long ldy, float eps, int buf_elems) {
    constexpr int V = 16 / sizeof(T);
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ float scratch[32];
    __shared__ float partial[2];
    __shared__ __align__(8) uint64_t bars[2];
    T* const buf0 = reinterpret_cast<T*>(smem_raw);
    const unsigned rank = C > 1 ? cluster_rank() : 0;
    int begin, len;
    slice<T, C>(cols, rank, begin, len);
    const int units = gridDim.x / C;
    const int unit = blockIdx.x / C;
    if (threadIdx.x == 0) { mbar_init(&bars[0]); mbar_init(&bars[1]); asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
    __syncthreads();
    auto issue = [&](int r, int b) {
        const T* x = X + r * ldx + begin;
        const Layout l = layout_of(x, len);
        const unsigned bytes = l.nvec * 16;
        if (bytes) {
            mbar_expect(&bars[b], bytes);
            bulk_load(buf0 + b * buf_elems + l.head + l.pad, x + l.head, bytes, &bars[b]);
        } else {
            asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_addr(&bars[b])) : "memory");
        }
    };
    if (threadIdx.x == 0 && unit < rows) issue(unit, 0);
    unsigned phases = 0;  // bit b: the parity to wait for on buffer b
    int i = 0;
    for (int r = unit; r < rows; r += units, ++i) {
        const int b = i & 1;
        if (threadIdx.x == 0 && r + units < rows) issue(r + units, b ^ 1);
        const T* x = X + r * ldx + begin;
        T* y = Y + r * ldy + begin;
        T* buf = buf0 + b * buf_elems;
        const Layout l = layout_of(x, len);
        for (int k = threadIdx.x; k < l.head; k += THREADS) buf[k + l.pad] = x[k];
        for (int k = l.head + l.nvec * V + threadIdx.x; k < len; k += THREADS) buf[k + l.pad] = x[k];
        mbar_wait(&bars[b], (phases >> b) & 1);
        phases ^= 1u << b;
        __syncthreads();
        float mul, shift = 0.f;
        if (SOFTMAX) {
            float m = -INFINITY;
            each_cached<T, THREADS>(buf, l, len, [&](float v) { m = fmaxf(m, v); });
            m = block_reduce<THREADS, true>(m, scratch);
            if (C > 1) {
                if (threadIdx.x == 0) partial[0] = m;
                cluster_arrive(); cluster_wait();
                m = -INFINITY;
                for (unsigned k = 0; k < C; ++k) m = fmaxf(m, remote_load(&partial[0], k));
            }
            shift = m * 1.4426950408889634f;
            float s = 0.f;
            each_cached<T, THREADS>(buf, l, len, [&](float v) { s += exp2f(fmaf(v, 1.4426950408889634f, -shift)); });
            s = block_reduce<THREADS, false>(s, scratch);
            if (C > 1) {
                if (threadIdx.x == 0) partial[1] = s;
                cluster_arrive(); cluster_wait();
                s = 0.f;
                for (unsigned k = 0; k < C; ++k) s += remote_load(&partial[1], k);
            }
            mul = 1.f / s;
        } else {
            float ss = 0.f;
            each_cached<T, THREADS>(buf, l, len, [&](float v) { ss = fmaf(v, v, ss); });
            ss = block_reduce<THREADS, false>(ss, scratch);
            if (C > 1) {
                if (threadIdx.x == 0) partial[0] = ss;
                cluster_arrive(); cluster_wait();
                ss = 0.f;
                for (unsigned k = 0; k < C; ++k) ss += remote_load(&partial[0], k);
            }
            mul = rsqrtf(ss / cols + eps);
        }
        // Partials are read before the next row overwrites them.
        if (C > 1) { cluster_arrive(); cluster_wait(); }
        const T* w = W + begin;
        store_cached<T, THREADS>(y, len, buf, l.pad, [&](int k, float v) {
            return SOFTMAX ? exp2f(fmaf(v, 1.4426950408889634f, -shift)) * mul : v * mul * to_f(__ldg(&w[k]));
        });
        // The buffer is free for row i + 2 once every thread has written from it.
        __syncthreads();
    }
}

// Controls: the block kernel's structure with no arithmetic (row → shared memory → row), and a
// plain streaming copy of the same rows (no shared memory, no barrier).
template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS) row_copy_smem(const T* __restrict__ X, T* __restrict__ Y, int rows, int cols, long ldx, long ldy) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* cache = reinterpret_cast<T*>(smem_raw);
    const int r = blockIdx.x;
    const T* x = X + r * ldx;
    T* y = Y + r * ldy;
    const int pad = cache_pad(x);
    load_cached<T, THREADS>(x, cols, cache, pad, [](float) {});
    __syncthreads();
    store_cached<T, THREADS>(y, cols, cache, pad, [](int, float v) { return v; });
}

template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS) row_copy_direct(const T* __restrict__ X, T* __restrict__ Y, int rows, int cols, long ldx, long ldy) {
    constexpr int V = 16 / sizeof(T);
    const int r = blockIdx.x;
    const T* x = X + r * ldx;
    T* y = Y + r * ldy;
    const Split<T> s(x, cols);
    for (int i = threadIdx.x; i < s.head; i += THREADS) y[i] = x[i];
    const uint4* vx = reinterpret_cast<const uint4*>(x + s.head);
    uint4* vy = reinterpret_cast<uint4*>(y + s.head);
    #pragma unroll 4
    for (int v = threadIdx.x; v < s.nvec; v += THREADS) __stcs(&vy[v], __ldcs(&vx[v]));
    for (int i = s.head + s.nvec * V + threadIdx.x; i < cols; i += THREADS) y[i] = x[i];
}

// Controls for the wide-row gap: the whole array copied as one flat buffer with a grid-stride
// loop (as cudaMemcpy would), and rows copied by C consecutive blocks that take turns over the
// row's 16-byte vectors THREADS at a time (fewer, faster row streams).
template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS) flat_copy(const uint4* __restrict__ X, uint4* __restrict__ Y, long nvec) {
    for (long v = blockIdx.x * long(THREADS) + threadIdx.x; v < nvec; v += long(gridDim.x) * THREADS) __stcs(&Y[v], __ldcs(&X[v]));
}

template <typename T, int THREADS, int C>
__global__ void __launch_bounds__(THREADS) row_copy_interleaved(const T* __restrict__ X, T* __restrict__ Y, int rows, int cols, long ldx, long ldy) {
    constexpr int V = 16 / sizeof(T);
    const int r = blockIdx.x / C, k = blockIdx.x % C;
    const T* x = X + r * ldx;
    T* y = Y + r * ldy;
    const Split<T> s(x, cols);
    if (k == 0) {
        for (int i = threadIdx.x; i < s.head; i += THREADS) y[i] = x[i];
        for (int i = s.head + s.nvec * V + threadIdx.x; i < cols; i += THREADS) y[i] = x[i];
    }
    const uint4* vx = reinterpret_cast<const uint4*>(x + s.head);
    uint4* vy = reinterpret_cast<uint4*>(y + s.head);
    constexpr int U = 4;
    for (int base = k * THREADS; base < s.nvec; base += U * C * THREADS) {
        uint4 raw[U];
        #pragma unroll
        for (int u = 0; u < U; ++u) {
            const int v = base + u * C * THREADS + threadIdx.x;
            if (v < s.nvec) raw[u] = __ldcs(&vx[v]);
        }
        #pragma unroll
        for (int u = 0; u < U; ++u) {
            const int v = base + u * C * THREADS + threadIdx.x;
            if (v < s.nvec) __stcs(&vy[v], raw[u]);
        }
    }
}

// v7: a cluster of C blocks per row taking turns over the row's vectors, THREADS at a time (the
// interleaved copy control's access pattern), each block caching its turns in shared memory;
// the row's statistics are combined over the cluster through distributed shared memory.
template <typename T, int THREADS, int C, bool SOFTMAX>
__global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS) rows_interleaved(const T* __restrict__ X, const T* __restrict__ W, T* __restrict__ Y, int rows, int cols, long ldx, long ldy, float eps, int unused) {
    constexpr int V = 16 / sizeof(T);
    constexpr int U = 4;
    extern __shared__ __align__(16) uint4 cache[];
    __shared__ float scratch[32];
    __shared__ float partial[2];
    __shared__ T ends[2 * V];
    const unsigned k = cluster_rank();
    const int r = blockIdx.x / C;
    const T* x = X + r * ldx;
    T* y = Y + r * ldy;
    const Split<T> s(x, cols);
    const int tail0 = s.head + s.nvec * V, tail = cols - tail0;
    const uint4* vx = reinterpret_cast<const uint4*>(x + s.head);
    uint4* vy = reinterpret_cast<uint4*>(y + s.head);
    // Turn q of this block covers vectors (q * C + k) * THREADS + threadIdx.x.
    const int turns = s.nvec > int(k) * THREADS ? (s.nvec - int(k) * THREADS + C * THREADS - 1) / (C * THREADS) : 0;
    auto vec_of = [&](int q) { return (q * C + int(k)) * THREADS + int(threadIdx.x); };
    float acc = SOFTMAX ? -INFINITY : 0.f;
    auto take = [&](float v) { acc = SOFTMAX ? fmaxf(acc, v) : fmaf(v, v, acc); };
    for (int q = 0; q < turns; q += U) {
        uint4 raw[U];
        #pragma unroll
        for (int u = 0; u < U; ++u) if (q + u < turns && vec_of(q + u) < s.nvec) raw[u] = __ldcs(&vx[vec_of(q + u)]);
        #pragma unroll
        for (int u = 0; u < U; ++u) {
            if (q + u < turns && vec_of(q + u) < s.nvec) {
                cache[(q + u) * THREADS + threadIdx.x] = raw[u];
                const T* e = reinterpret_cast<const T*>(&raw[u]);
                #pragma unroll
                for (int j = 0; j < V; ++j) take(to_f(e[j]));
            }
        }
    }
    if (k == 0 && threadIdx.x < s.head) { ends[threadIdx.x] = x[threadIdx.x]; take(to_f(ends[threadIdx.x])); }
    if (k == 0 && threadIdx.x < tail) { ends[V + threadIdx.x] = x[tail0 + threadIdx.x]; take(to_f(ends[V + threadIdx.x])); }
    acc = block_reduce<THREADS, SOFTMAX>(acc, scratch);
    if (threadIdx.x == 0) partial[0] = acc;
    cluster_arrive();
    cluster_wait();
    float stat = SOFTMAX ? -INFINITY : 0.f;
    #pragma unroll
    for (unsigned c = 0; c < C; ++c) { const float p = remote_load(&partial[0], c); stat = SOFTMAX ? fmaxf(stat, p) : stat + p; }
    float mul;
    const float shift = stat * 1.4426950408889634f;
    if (SOFTMAX) {
        float sum = 0.f;
        for (int q = 0; q < turns; ++q) {
            if (vec_of(q) >= s.nvec) break;
            uint4 raw = cache[q * THREADS + threadIdx.x];
            T* e = reinterpret_cast<T*>(&raw);
            #pragma unroll
            for (int j = 0; j < V; ++j) { const float v = exp2f(fmaf(to_f(e[j]), 1.4426950408889634f, -shift)); e[j] = from_f<T>(v); sum += v; }
            cache[q * THREADS + threadIdx.x] = raw;
        }
        if (k == 0 && threadIdx.x < s.head) { const float v = exp2f(fmaf(to_f(ends[threadIdx.x]), 1.4426950408889634f, -shift)); ends[threadIdx.x] = from_f<T>(v); sum += v; }
        if (k == 0 && threadIdx.x < tail) { const float v = exp2f(fmaf(to_f(ends[V + threadIdx.x]), 1.4426950408889634f, -shift)); ends[V + threadIdx.x] = from_f<T>(v); sum += v; }
        sum = block_reduce<THREADS, false>(sum, scratch);
        if (threadIdx.x == 0) partial[1] = sum;
        cluster_arrive();
        cluster_wait();
        float total = 0.f;
        #pragma unroll
        for (unsigned c = 0; c < C; ++c) total += remote_load(&partial[1], c);
        mul = 1.f / total;
    } else {
        mul = rsqrtf(stat / cols + eps);
    }
    // Every block has read the others' partials before any leaves.
    cluster_arrive();
    const bool w_aligned = s.head % V == 0;
    for (int q = 0; q < turns; ++q) {
        const int v = vec_of(q);
        if (v >= s.nvec) break;
        uint4 raw = cache[q * THREADS + threadIdx.x], out;
        const T* e = reinterpret_cast<const T*>(&raw);
        T* o = reinterpret_cast<T*>(&out);
        if (SOFTMAX) {
            #pragma unroll
            for (int j = 0; j < V; ++j) o[j] = from_f<T>(to_f(e[j]) * mul);
        } else if (w_aligned) {
            const uint4 wv = __ldg(reinterpret_cast<const uint4*>(W + s.head) + v);
            const T* we = reinterpret_cast<const T*>(&wv);
            #pragma unroll
            for (int j = 0; j < V; ++j) o[j] = from_f<T>(to_f(e[j]) * mul * to_f(we[j]));
        } else {
            #pragma unroll
            for (int j = 0; j < V; ++j) o[j] = from_f<T>(to_f(e[j]) * mul * to_f(__ldg(&W[s.head + v * V + j])));
        }
        __stcs(&vy[v], out);
    }
    if (k == 0 && threadIdx.x < s.head) y[threadIdx.x] = from_f<T>(to_f(ends[threadIdx.x]) * mul * (SOFTMAX ? 1.f : to_f(W[threadIdx.x])));
    if (k == 0 && threadIdx.x < tail) y[tail0 + threadIdx.x] = from_f<T>(to_f(ends[V + threadIdx.x]) * mul * (SOFTMAX ? 1.f : to_f(W[tail0 + threadIdx.x])));
    cluster_wait();
}

template <typename T> float host_to_f(T v);
template <> float host_to_f<float>(float v) { return v; }
template <> float host_to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> T host_from_f(float v);
template <> float host_from_f<float>(float v) { return v; }
template <> __nv_bfloat16 host_from_f<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

struct Case { const char* op; const char* dtype; int rows, cols; };

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

enum Kind { BLOCK, CLUSTER, WARP, STREAM, COPY_SMEM, COPY_DIRECT, COPY_FLAT, COPY_INTERLEAVED, INTERLEAVED };

template <typename T, int THREADS, Kind KIND = BLOCK, int C = 1>
void run(const Case& c, int smem_cap_bytes, FILE* log) {
    const long ld = c.cols;
    const size_t n = size_t(c.rows) * ld;
    const size_t bytes = n * sizeof(T);
    // Enough input sets to overflow the 50 MB L2 twice.
    const int sets = std::max<int>(2, int((120ull << 20) / bytes) + 1);
    std::vector<T*> xs(sets), ys(sets);
    std::mt19937 rng(1234);
    std::normal_distribution<float> dist(0.f, 2.f);
    std::vector<T> hx(n);
    for (auto& v : hx) v = host_from_f<T>(dist(rng));
    std::vector<T> hw(c.cols);
    for (auto& v : hw) v = host_from_f<T>(1.f + 0.1f * dist(rng));
    for (int i = 0; i < sets; ++i) {
        CHECK(cudaMalloc(&xs[i], bytes));
        CHECK(cudaMalloc(&ys[i], bytes));
        CHECK(cudaMemcpy(xs[i], hx.data(), bytes, cudaMemcpyHostToDevice));
        CHECK(cudaMemset(ys[i], 0xff, bytes));  // NaN-ish poison
    }
    T* w; CHECK(cudaMalloc(&w, c.cols * sizeof(T)));
    CHECK(cudaMemcpy(w, hw.data(), c.cols * sizeof(T), cudaMemcpyHostToDevice));
    constexpr int V = 16 / sizeof(T);
    const int slice_cols = ((c.cols + C - 1) / C + V - 1) / V * V;
    const int buf_elems = (slice_cols + 2 * V + 63) / 64 * 64;
    const int nvec_max = (c.cols + V - 1) / V;
    const int smem = KIND == WARP ? 0
        : KIND == STREAM ? 2 * buf_elems * sizeof(T)
        : KIND == INTERLEAVED ? (nvec_max + C * THREADS - 1) / (C * THREADS) * THREADS * 16
        : (slice_cols + V) * sizeof(T);
    const int cache_cols = c.cols;
    if (smem > smem_cap_bytes) { printf("%s %s %dx%d: the row does not fit shared memory\n", c.op, c.dtype, c.rows, c.cols); return; }
    const bool soft = c.op[0] == 's';
    const bool copy = c.op[0] == 'c';
    constexpr int WARPS = THREADS / 32, VPL = 1024 * 2 / 16 / 32 * (sizeof(T) == 4 ? 2 : 1);  // rows of 1024 elements
    if (KIND == WARP && c.cols > 32 * VPL * V) { printf("row too wide for the warp kernel\n"); return; }
    const int max_smem = 232448 - 1024;
    if (KIND == INTERLEAVED) {
        if (soft) CHECK(cudaFuncSetAttribute(rows_interleaved<T, THREADS, C, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
        else CHECK(cudaFuncSetAttribute(rows_interleaved<T, THREADS, C, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
    }
    if (KIND == COPY_SMEM) CHECK(cudaFuncSetAttribute(row_copy_smem<T, THREADS>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
    if (KIND == BLOCK) {
        if (soft) CHECK(cudaFuncSetAttribute(softmax<T, THREADS>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
        else CHECK(cudaFuncSetAttribute(rmsnorm<T, THREADS>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
    } else if (KIND == STREAM) {
        if (soft) CHECK(cudaFuncSetAttribute(rows_stream<T, THREADS, C, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
        else CHECK(cudaFuncSetAttribute(rows_stream<T, THREADS, C, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
    } else if (KIND == CLUSTER) {
        if (soft) CHECK(cudaFuncSetAttribute(softmax_cluster<T, THREADS, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
        else CHECK(cudaFuncSetAttribute(rmsnorm_cluster<T, THREADS, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
    }
    auto launch = [&](int i) {
        if (KIND == INTERLEAVED) {
            if (soft) rows_interleaved<T, THREADS, C, true><<<c.rows * C, THREADS, smem>>>(xs[i], w, ys[i], c.rows, c.cols, ld, ld, 1e-6f, 0);
            else rows_interleaved<T, THREADS, C, false><<<c.rows * C, THREADS, smem>>>(xs[i], w, ys[i], c.rows, c.cols, ld, ld, 1e-6f, 0);
        } else if (KIND == COPY_FLAT) {
            flat_copy<T, THREADS><<<132 * 4, THREADS>>>(reinterpret_cast<const uint4*>(xs[i]), reinterpret_cast<uint4*>(ys[i]), long(bytes / 16));
        } else if (KIND == COPY_INTERLEAVED) {
            row_copy_interleaved<T, THREADS, C><<<c.rows * C, THREADS>>>(xs[i], ys[i], c.rows, c.cols, ld, ld);
        } else if (KIND == COPY_SMEM) {
            row_copy_smem<T, THREADS><<<c.rows, THREADS, smem>>>(xs[i], ys[i], c.rows, c.cols, ld, ld);
        } else if (KIND == COPY_DIRECT) {
            row_copy_direct<T, THREADS><<<c.rows, THREADS>>>(xs[i], ys[i], c.rows, c.cols, ld, ld);
        } else if (KIND == BLOCK) {
            if (soft) softmax<T, THREADS><<<c.rows, THREADS, smem>>>(xs[i], ys[i], c.rows, c.cols, ld, ld, cache_cols);
            else rmsnorm<T, THREADS><<<c.rows, THREADS, smem>>>(xs[i], w, ys[i], c.rows, c.cols, ld, ld, 1e-6f, cache_cols);
        } else if (KIND == CLUSTER) {
            if (soft) softmax_cluster<T, THREADS, C><<<c.rows * C, THREADS, smem>>>(xs[i], ys[i], c.rows, c.cols, ld, ld, 0);
            else rmsnorm_cluster<T, THREADS, C><<<c.rows * C, THREADS, smem>>>(xs[i], w, ys[i], c.rows, c.cols, ld, ld, 1e-6f, 0);
        } else if (KIND == STREAM) {
            int sms = 0;
            CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
            const int grid = std::min(c.rows, sms / C) * C;
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(grid);
            cfg.blockDim = dim3(THREADS);
            cfg.dynamicSmemBytes = smem;
            cudaLaunchAttribute attr[1];
            attr[0].id = cudaLaunchAttributeClusterDimension;
            attr[0].val.clusterDim.x = C; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
            cfg.attrs = attr; cfg.numAttrs = 1;
            if (soft) CHECK(cudaLaunchKernelEx(&cfg, rows_stream<T, THREADS, C, true>, (const T*)xs[i], (const T*)w, ys[i], c.rows, c.cols, ld, ld, 1e-6f, buf_elems));
            else CHECK(cudaLaunchKernelEx(&cfg, rows_stream<T, THREADS, C, false>, (const T*)xs[i], (const T*)w, ys[i], c.rows, c.cols, ld, ld, 1e-6f, buf_elems));
        } else {
            const int blocks = (c.rows + WARPS - 1) / WARPS;
            if (soft) rows_warp<T, WARPS, VPL, true><<<blocks, THREADS>>>(xs[i], w, ys[i], c.rows, c.cols, ld, ld, 1e-6f, 0);
            else rows_warp<T, WARPS, VPL, false><<<blocks, THREADS>>>(xs[i], w, ys[i], c.rows, c.cols, ld, ld, 1e-6f, 0);
        }
    };
    launch(0);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    // Check 64 sampled rows against float64, and that every element was written.
    std::vector<T> hy(n);
    CHECK(cudaMemcpy(hy.data(), ys[0], bytes, cudaMemcpyDeviceToHost));
    double err = 0, ref_norm = 0; long unwritten = 0;
    for (size_t i = 0; i < n; ++i) if (std::isnan(host_to_f<T>(hy[i]))) ++unwritten;
    for (int k = 0; k < 64; ++k) {
        const int r = (int)((long)k * 7919 % c.rows);
        const T* xr = &hx[size_t(r) * ld];
        std::vector<double> ref(c.cols);
        if (soft) {
            double mx = -1e300; for (int j = 0; j < c.cols; ++j) mx = std::max(mx, (double)host_to_f<T>(xr[j]));
            double s = 0; for (int j = 0; j < c.cols; ++j) { ref[j] = std::exp(host_to_f<T>(xr[j]) - mx); s += ref[j]; }
            for (auto& v : ref) v /= s;
        } else {
            double ss = 0; for (int j = 0; j < c.cols; ++j) { double v = host_to_f<T>(xr[j]); ss += v * v; }
            double sc = 1.0 / std::sqrt(ss / c.cols + 1e-6);
            for (int j = 0; j < c.cols; ++j) ref[j] = host_to_f<T>(xr[j]) * sc * host_to_f<T>(hw[j]);
        }
        for (int j = 0; j < c.cols; ++j) { double d = host_to_f<T>(hy[size_t(r) * ld + j]) - ref[j]; err += d * d; ref_norm += ref[j] * ref[j]; }
    }
    double rel = std::sqrt(err / ref_norm);
    if (copy) {
        rel = 0;
        for (size_t k = 0; k < n; ++k) if (host_to_f<T>(hy[k]) != host_to_f<T>(hx[k])) { rel = 1; break; }
    }
    cudaEvent_t a, b; CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&b));
    auto time = [&](auto f) {
        for (int i = 0; i < 5; ++i) f(i % sets);
        std::vector<float> ms;
        for (int i = 0; i < 31; ++i) {
            CHECK(cudaEventRecord(a)); f(i % sets); CHECK(cudaEventRecord(b)); CHECK(cudaEventSynchronize(b));
            float t; CHECK(cudaEventElapsedTime(&t, a, b)); ms.push_back(t);
        }
        CHECK(cudaGetLastError());
        return median(ms);
    };
    const float kernel_ms = time(launch);
    const float copy_ms = time([&](int i) { CHECK(cudaMemcpyAsync(ys[i], xs[i], bytes, cudaMemcpyDeviceToDevice)); });
    const double moved = 2.0 * bytes;
    printf("%-8s %-5s %6d x %-6d %s%d t%-4d | %8.3f ms %7.0f GB/s | copy %8.3f ms %7.0f GB/s | ratio %.3f | err %.2e unwritten %ld\n",
           c.op, c.dtype, c.rows, c.cols, KIND == BLOCK ? "block" : KIND == CLUSTER ? "cluster" : KIND == STREAM ? "stream" : KIND == COPY_SMEM ? "copysmem" : KIND == COPY_DIRECT ? "copydirect" : KIND == COPY_FLAT ? "copyflat" : KIND == COPY_INTERLEAVED ? "copyinter" : KIND == INTERLEAVED ? "interleaved" : "warp", C, THREADS, kernel_ms, moved / kernel_ms / 1e6, copy_ms, moved / copy_ms / 1e6, copy_ms / kernel_ms, rel, unwritten);
    fprintf(log, "%s,%s,%d,%d,%s%d,%d,%.4f,%.4f,%.4f,%.3e\n", c.op, c.dtype, c.rows, c.cols, KIND == BLOCK ? "block" : KIND == CLUSTER ? "cluster" : KIND == STREAM ? "stream" : KIND == COPY_SMEM ? "copysmem" : KIND == COPY_DIRECT ? "copydirect" : KIND == COPY_FLAT ? "copyflat" : KIND == COPY_INTERLEAVED ? "copyinter" : KIND == INTERLEAVED ? "interleaved" : "warp", C, THREADS, kernel_ms, copy_ms, copy_ms / kernel_ms, rel);
    for (int i = 0; i < sets; ++i) { cudaFree(xs[i]); cudaFree(ys[i]); }
    cudaFree(w);
}

template <typename T>
void sweep(const char* dtype, int cap, FILE* log) {
    for (const char* op : {"softmax", "rmsnorm"}) {
        for (int rows_cols : {0, 1, 2, 3}) {
            const Case c = rows_cols == 0 ? Case{op, dtype, 4096, 50257} : rows_cols == 1 ? Case{op, dtype, 1024, 32768}
                         : rows_cols == 2 ? Case{op, dtype, 32768, 4096} : Case{op, dtype, 8192, 8192};
            run<T, 512, INTERLEAVED, 4>(c, cap, log);
            run<T, 256, INTERLEAVED, 4>(c, cap, log);
            run<T, 512, INTERLEAVED, 2>(c, cap, log);
            if (rows_cols >= 2) run<T, 256, INTERLEAVED, 1>(c, cap, log);
        }
    }
}

int main(int argc, char** argv) {
    FILE* log = fopen(argc > 1 ? argv[1] : "proto.csv", "w");
    const int cap = 232448 - 1024;
    if (argc > 2) {  // one case, for ncu
        run<__nv_bfloat16, 512>({"softmax", "bf16", 4096, 50257}, cap, log);
        run<__nv_bfloat16, 512, COPY_SMEM>({"copy", "bf16", 4096, 50257}, cap, log);
    } else {
        sweep<__nv_bfloat16>("bf16", cap, log);
        sweep<float>("f32", cap, log);
    }
    fclose(log);
    return 0;
}
