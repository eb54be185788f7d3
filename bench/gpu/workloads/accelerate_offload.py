"""Hugging Face accelerate's `cpu_offload` of a Llama-shaped transformers model: the weights
stay in CPU memory and every layer's are copied to the GPU at every forward (accelerate's
AlignDevicesHook, a blocking `.to(device)` per weight). The model is built from a config with
random weights from a fixed seed (nothing is downloaded): 12 layers, hidden 1024, 256 M
parameters, 1 GiB of fp32 weights. A warm-up forward, then FORWARDS (default 5) timed
forwards of a fixed batch of 4 x 128 tokens; the last logits are checked bit for bit against
the program as written (common.py).

BY_HAND=1: what an expert does, the offloaded state_dict pinned first (`v.pin_memory()` of
each weight, outside the timed part): 1 GiB pinned."""
import os
import time

import common
import torch
from accelerate import cpu_offload
from transformers import LlamaConfig, LlamaForCausalLM

forwards = int(os.environ.get("FORWARDS", "5"))
common.start()
config = LlamaConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=12,
                     num_attention_heads=16, num_key_value_heads=16, vocab_size=32000)
model = LlamaForCausalLM(config).eval()
state = model.state_dict()
weights = sum(v.numel() * v.element_size() for v in state.values())
if common.BY_HAND:
    state = {k: v.pin_memory() for k, v in state.items()}
cpu_offload(model, execution_device=torch.device("cuda"), state_dict=state)
ids = torch.randint(0, config.vocab_size, (4, 128), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    model(ids.cuda())  # warm-up
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(forwards):
        logits = model(ids.cuda()).logits
    torch.cuda.synchronize()
    seconds = time.perf_counter() - began
checks, wrong = common.same_as_written("accelerate_offload", logits)
common.emit(seconds, checks, wrong, weights, forwards=forwards, weights_bytes=weights)
