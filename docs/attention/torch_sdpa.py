# torch's scaled_dot_product_attention by backend (cuDNN, flash), bf16 forward, timed as
# `tilesmith bench` times a variant: input sets rotated past the L2 (twice its size, 2 to 64
# sets), warm-up calls on every set for at least 10 ms, then 25 calls each between two CUDA events,
# all enqueued before one wait (a wait after each call would time the host's dispatch with the
# kernel: 5-10% more on sub-millisecond calls), and the median; TFLOP/s counted as bench counts
# them (4·batch·heads·seq_q·seq_k·head_dim, halved under the causal mask). Run on the device
# beside bench, in the same call: `python3 docs/attention/torch_sdpa.py [WORD ...]`, where each
# WORD keeps the rows whose label holds it (`16384`, `x64`), else every row
# (docs/attention/NOTES.md).
import sys
import time

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
    # Decoding at 1, 8 and 64 sequences, 4k to 1M keys (issue 60).
    (1, 64, 8, 1, 131072, 128, False),
    (1, 64, 8, 1, 1048576, 128, False),
    (8, 32, 8, 1, 32768, 128, False),
    (64, 32, 8, 1, 4096, 128, False),
]


def tflops(fn, sets, flops):
    start = time.perf_counter()
    i = 0
    while i < max(3, sets) or time.perf_counter() - start < 0.01:
        fn(i % sets)
        torch.cuda.synchronize()
        i += 1
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(25)]
    for k, (begin, end) in enumerate(events):
        begin.record()
        fn((i + k) % sets)
        end.record()
    torch.cuda.synchronize()
    times = sorted(begin.elapsed_time(end) for begin, end in events)
    return flops / times[len(times) // 2] / 1e9


print(torch.cuda.get_device_name())
for b, h, kh, sq, sk, d, causal in SHAPES:
    label = "%dx%d(%d)x%dx%dx%d %s" % (b, h, kh, sq, sk, d, "causal" if causal else "")
    if len(sys.argv) > 1 and not any(word in label for word in sys.argv[1:]):
        continue
    per_set = 2 * (2 * b * h * sq * d + 2 * b * kh * sk * d)
    sets = min(64, max(2, -(-2 * torch.cuda.get_device_properties(0).L2_cache_size // per_set)))
    q = [torch.randn(b, h, sq, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    k = [torch.randn(b, kh, sk, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    v = [torch.randn(b, kh, sk, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    flops = 4 * b * h * sq * sk * d / (2 if causal else 1)
    row = []
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        try:
            with sdpa_kernel(backend):
                call = lambda i: F.scaled_dot_product_attention(q[i], k[i], v[i], is_causal=causal, enable_gqa=h != kh)
                row.append("%.1f" % tflops(call, sets, flops))
        except RuntimeError:
            row.append("-")
    print("| %s | cudnn %s | flash %s |" % (label, row[0], row[1]))
