# torch's scaled_dot_product_attention by backend (cuDNN, flash), bf16 forward: CUDA events,
# the median of 15 runs after 3 warm-ups, TFLOP/s counted as `tilesmith bench` counts them
# (4·batch·heads·seq_q·seq_k·head_dim, halved under the causal mask). Run on the device beside
# bench, in the same call: `python3 docs/attention/torch_sdpa.py [WORD ...]`, where each WORD
# keeps the rows whose label holds it (`16384`, `x64`), else every row (docs/attention/NOTES.md).
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# batch, heads, kv_heads, seq_q, seq_k, head_dim, causal: the shapes.
SHAPES = [
    (4, 32, 32, 4096, 4096, 128, False),
    (4, 32, 32, 4096, 4096, 128, True),
    (8, 32, 8, 2048, 2048, 128, True),
    (8, 32, 8, 2048, 2048, 128, False),
    (16, 16, 16, 1024, 1024, 64, False),
    (1, 32, 8, 16384, 16384, 128, True),
    (4, 32, 8, 1, 8192, 128, False),
    (4, 32, 8, 16, 8192, 128, False),
]


def tflops(fn, flops):
    for _ in range(3):
        fn()
    times = []
    for _ in range(15):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return flops / times[len(times) // 2] / 1e9


print(torch.cuda.get_device_name())
for b, h, kh, sq, sk, d, causal in SHAPES:
    label = "%dx%d(%d)x%dx%dx%d %s" % (b, h, kh, sq, sk, d, "causal" if causal else "")
    if len(sys.argv) > 1 and not any(word in label for word in sys.argv[1:]):
        continue
    q = torch.randn(b, h, sq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, kh, sk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, kh, sk, d, device="cuda", dtype=torch.bfloat16)
    flops = 4 * b * h * sq * sk * d / (2 if causal else 1)
    row = []
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        try:
            with sdpa_kernel(backend):
                row.append("%.1f" % tflops(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=h != kh), flops))
        except RuntimeError:
            row.append("-")
    print("| %s | cudnn %s | flash %s |" % (label, row[0], row[1]))
