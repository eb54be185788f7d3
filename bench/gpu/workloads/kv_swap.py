"""A KV-cache swap between GPU blocks and a CPU block pool, as vLLM swaps sequences out and in
under memory pressure (vLLM's CacheEngine and `swap_blocks`: one `cudaMemcpyAsync` per block,
per layer, for keys and values; here each is a `.copy_(..., non_blocking=True)` of one
contiguous block). Llama-7B's shape: 32 layers, blocks of 16 tokens x 32 heads x 128 fp16
(128 KiB a block), 256 GPU blocks a layer, a CPU pool of 128 blocks a layer (1 GiB, made with
`torch.zeros` per layer as vLLM does). Each step writes new keys and values into 16 GPU blocks
(the decode), swaps 16 GPU blocks out to the pool and 16 pool blocks in (1,024 copies each
way), then synchronises. STEPS (default 30). What the GPU cache and the pool hold at the end
is checked bit for bit (an exact fingerprint of every layer) against the program as written.

BY_HAND=1: the pool allocated pinned (`pin_memory=True`), which is what vLLM does where it can
pin; vLLM falls back to pageable where pinning is unavailable (WSL, some containers)."""
import os
import time

import common
import torch

steps = int(os.environ.get("STEPS", "30"))
LAYERS, GPU_BLOCKS, CPU_BLOCKS, SWAP = 32, 256, 128, 16
BLOCK = 16 * 32 * 128  # fp16 elements a block: 128 KiB
common.start()
g = torch.Generator(device="cuda").manual_seed(0)
gpu = [[torch.randn(GPU_BLOCKS, BLOCK, device="cuda", generator=g).half() for _ in range(2)]
       for _ in range(LAYERS)]
began = time.perf_counter()
pool = [[torch.zeros(CPU_BLOCKS, BLOCK, dtype=torch.float16, pin_memory=common.BY_HAND)
         for _ in range(2)] for _ in range(LAYERS)]
for step in range(steps):
    base = (step * 7) % GPU_BLOCKS
    written = [(base + i) % GPU_BLOCKS for i in range(SWAP)]
    for kv in gpu:
        for cache in kv:
            cache[written] = float(step % 64)  # the decode writes new keys and values
    out_src = written
    out_dst = [(step * SWAP + i) % CPU_BLOCKS for i in range(SWAP)]
    in_src = [(step * SWAP + 64 + i) % CPU_BLOCKS for i in range(SWAP)]
    in_dst = [(base + 128 + i) % GPU_BLOCKS for i in range(SWAP)]
    for layer in range(LAYERS):
        for c in range(2):
            for s, d in zip(out_src, out_dst):
                pool[layer][c][d].copy_(gpu[layer][c][s], non_blocking=True)
    torch.cuda.synchronize()
    for layer in range(LAYERS):
        for c in range(2):
            for s, d in zip(in_src, in_dst):
                gpu[layer][c][d].copy_(pool[layer][c][s], non_blocking=True)
    torch.cuda.synchronize()
seconds = time.perf_counter() - began


def fingerprint(t):
    """An exact integer fingerprint of a tensor's bits, computed on the GPU."""
    bits = t.cuda().view(torch.int16).to(torch.int64).view(-1)
    weights = torch.arange(bits.numel(), device="cuda", dtype=torch.int64).remainder_(65521) + 1
    return (bits * weights).sum()


prints = torch.stack([fingerprint(t) for kv in gpu + pool for t in kv]).cpu()
checks, wrong = common.same_as_written("kv_swap", prints)
common.emit(seconds, checks, wrong, LAYERS * 2 * CPU_BLOCKS * BLOCK * 2, steps=steps,
            copies=steps * LAYERS * 2 * SWAP * 2)
