"""A Llama-shaped model built from a config (random weights from a fixed seed; nothing is
downloaded) under accelerate's `cpu_offload`: its weights stay in CPU memory and each layer's
are copied to the GPU at every forward. Runs 5 forwards of a fixed batch, and compares the
logits with those saved by the first run given the same path (the run as written): equal, or
the program exits 1. BY_HAND=1 pins the offloaded state_dict first (what an expert does).
Prints one JSON line: seconds of the forwards, checks, mismatches.
Usage: offload_llama.py WANT.pt"""
import json, os, sys, time

import torch
from accelerate import cpu_offload
from transformers import LlamaConfig, LlamaForCausalLM

want_path = sys.argv[1]
torch.manual_seed(0)
config = LlamaConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=12,
                     num_attention_heads=16, num_key_value_heads=16, vocab_size=32000)
model = LlamaForCausalLM(config).eval()
state = model.state_dict()
if os.environ.get("BY_HAND") == "1":
    state = {k: v.pin_memory() for k, v in state.items()}
cpu_offload(model, execution_device=torch.device("cuda"), state_dict=state)
ids = torch.randint(0, config.vocab_size, (4, 128), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    model(ids.cuda())  # warm-up
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(5):
        logits = model(ids.cuda()).logits
    torch.cuda.synchronize()
    seconds = time.perf_counter() - began
logits = logits.float().cpu()
if not os.path.exists(want_path):
    torch.save(logits, want_path)
want = torch.load(want_path)
same = torch.equal(logits, want)
print(json.dumps({"seconds": round(seconds, 3), "checks": 1, "mismatches": 0 if same else 1}))
sys.exit(0 if same else 1)
