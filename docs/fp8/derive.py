"""Derives the fp8 prototype kernel (fp8_kernel.cuh) from the generated bf16 wgmma kernel
gemm_tn_128x256x64_wgmma_w12_unchecked: e4m3 inputs with K blocks of 128 bytes (TK = 128),
wgmma m64n256k32 e4m3 (K-major only: no transpose immediates), bf16 outputs scaled by one
float. Run from the repository root: python3 docs/fp8/derive.py"""

src = open("generated/gemm_tn_128x256x64_wgmma_w12_unchecked.cu").read()


def rep(old, new):
    global src
    assert src.count(old) == 1, old
    src = src.replace(old, new)


rep("#include <cuda_bf16.h>", "#include <cuda_bf16.h>\n#include <cuda_fp8.h>")
rep("typedef __nv_bfloat16 T;", "// Prototype: fp8 e4m3 inputs, bf16 outputs (issue 16, item 3).\ntypedef __nv_fp8_e4m3 T;\ntypedef __nv_bfloat16 TC;")
start = src.index("template <int TA, int TB>\n__device__ __forceinline__ void wgmma_m64n256k16")
end = src.index("}\n", src.index('"l"(desc_a)', start)) + 2
mma = src[start:end].replace("template <int TA, int TB>\n", "").replace("wgmma_m64n256k16", "wgmma_m64n256k32_e4m3")
mma = mma.replace("m64n256k16.f32.bf16.bf16", "m64n256k32.f32.e4m3.e4m3").replace("acc, 1, 1, %131, %132;", "acc, 1, 1;")
src = src[:start] + mma.replace(', "n"(TA), "n"(TB));', ");") + src[end:]
rep("#define TK 64", "#define TK 128")
rep("#define A_BYTES (TM * TK * 2)", "#define A_BYTES (TM * TK)")
rep("#define B_BYTES (TN * TK * 2)", "#define B_BYTES (TN * TK)")
rep("struct alignas(2 * sizeof(T)) Pair { T lo, hi; };", "struct alignas(2 * sizeof(TC)) Pair { TC lo, hi; };")
rep("const Pair pair{ from_float<T>(lo), from_float<T>(hi) };", "const Pair pair{ from_float<TC>(lo), from_float<TC>(hi) };")
rep("const CUtensorMap* tmC, T* C,", "const CUtensorMap* tmC, TC* C, float scale,")
rep("const float2 v = epilogue_two(ep, d[4 * j + 2 * h], d[4 * j + 2 * h + 1], row, col, bias[j]);",
    "const float2 v = epilogue_two(ep, scale * d[4 * j + 2 * h], scale * d[4 * j + 2 * h + 1], row, col, bias[j]);")
rep("T* p = C + (long long)row * ldc + col;", "TC* p = C + (long long)row * ldc + col;")
rep("long long stride_a, long long stride_b, long long stride_c)\n{", "long long stride_a, long long stride_b, long long stride_c, float scale)\n{")
rep("const uint32_t a = base + stage * STAGE_BYTES + c * 64 * TK * 2;", "const uint32_t a = base + stage * STAGE_BYTES + c * 64 * TK;")
rep("""                for (int k = 0; k < TK / 16; ++k) {
                    const uint32_t step_a = A_MN_MAJOR ? k * 16 * 128 : k * 32;
                    const uint32_t step_b = B_MN_MAJOR ? k * 16 * 128 : k * 32;
                    wgmma_m64n256k16<A_MN_MAJOR, B_MN_MAJOR>(""", """                for (int k = 0; k < TK / 32; ++k) {
                    // 32 fp8 elements (32 bytes) along K per MMA.
                    const uint32_t step_a = k * 32, step_b = k * 32;
                    wgmma_m64n256k32_e4m3(""")
rep("epilogue<false>(d, at_problem(ep, offset_c), bias, out, &tmC, nullptr, problem,",
    "epilogue<false>(d, at_problem(ep, offset_c), bias, out, &tmC, nullptr, scale, problem,")
rep("gemm_tn_128x256x64_wgmma_w12_unchecked(", "gemm_fp8(")
open("docs/fp8/fp8_kernel.cuh", "w").write(src)
