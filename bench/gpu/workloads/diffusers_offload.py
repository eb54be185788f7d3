"""Hugging Face diffusers' `enable_sequential_cpu_offload` of a DDPM pipeline: the UNet's
weights stay in CPU memory and each submodule's are copied to the GPU when it runs, at every
denoising step (diffusers hands each component to accelerate's `cpu_offload`). The UNet is
built from a config with random weights from a fixed seed (nothing is downloaded): a
UNet2DModel of 64x64 images, channels 128/256/512/512, 2 layers a block. A warm-up of one step,
then STEPS (default 8) timed denoising steps of a batch of 2 images (DDPMPipeline's own loop,
its scheduler, the noise made on the GPU); the images are checked bit for bit against the program as written (common.py).

BY_HAND=1: what an expert does, the UNet's parameters and buffers pinned before offloading is
enabled (`p.data = p.data.pin_memory()`; accelerate keeps those very tensors as its CPU copy),
outside the timed part."""
import os
import time

import common
import torch
from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

steps = int(os.environ.get("STEPS", "8"))
common.start()
unet = UNet2DModel(sample_size=64, in_channels=3, out_channels=3, layers_per_block=2,
                   block_out_channels=(128, 256, 512, 512),
                   down_block_types=("DownBlock2D", "DownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
                   up_block_types=("UpBlock2D", "AttnUpBlock2D", "UpBlock2D", "UpBlock2D")).eval()
weights = sum(t.numel() * t.element_size() for t in list(unet.parameters()) + list(unet.buffers()))
if common.BY_HAND:
    with torch.no_grad():
        for t in list(unet.parameters()) + list(unet.buffers()):
            t.data = t.data.pin_memory()
pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=1000))
pipe.enable_sequential_cpu_offload()


def denoise(n, seed):
    """DDPMPipeline.__call__'s loop, with the noise made on the GPU: under sequential offload
    the pipeline's `device` is the weights' "meta" device, where its own call would start."""
    g = torch.Generator().manual_seed(seed)
    image = torch.randn((2, 3, 64, 64), generator=g).to("cuda")
    pipe.scheduler.set_timesteps(n)
    for t in pipe.scheduler.timesteps:
        out = pipe.unet(image, t).sample
        image = pipe.scheduler.step(out, t, image, generator=g).prev_sample
    return (image / 2 + 0.5).clamp(0, 1).cpu()


with torch.no_grad():
    denoise(1, 1)  # warm-up
    torch.cuda.synchronize()
    began = time.perf_counter()
    images = denoise(steps, 2)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - began
checks, wrong = common.same_as_written("diffusers_offload", images)
common.emit(seconds, checks, wrong, weights, steps=steps, weights_bytes=weights)
