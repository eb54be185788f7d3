//! `hotpin calibrate`: this machine's copy bandwidths (pageable and pinned, both directions,
//! at each of the cost model's sizes) and what pinning in place costs, written as the cost
//! file the allocator and `tracer report --costs` read.

use std::{
    ffi::c_void,
    path::PathBuf,
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use hotpin::cuda::{CudaRuntime, MemcpyKind};
use hotpin_policy::cost::{COST_FILE_FORMAT, CostFile, CostModel, Curve, Linear, SIZES};

#[derive(clap::Args, Debug)]
pub struct CalibrateArgs {
    /// The CUDA runtime to measure with.
    #[arg(long, default_value = "libcudart.so.13", value_name = "PATH")]
    cudart: PathBuf,
    /// Where to write the cost file (default: $HOTPIN_COSTS, else ~/.config/hotpin/costs.json).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Repetitions per measurement (the median is kept).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
}

pub fn run(args: CalibrateArgs) -> Result<ExitCode> {
    let cuda = CudaRuntime::load(&args.cudart)
        .with_context(|| format!("loading {}", args.cudart.display()))?;
    anyhow::ensure!(
        !cuda.is_standin(),
        "{} is the CUDA stand-in, a test fixture that is not CUDA: its timings mean nothing, \
         so no cost file is written; calibrate with the machine's real libcudart",
        args.cudart.display()
    );
    let devices = cuda.device_count().map_err(|e| anyhow::anyhow!("{e}"))?;
    anyhow::ensure!(devices > 0, "no CUDA device");
    let repeat = args.repeat.max(1);
    let largest = SIZES.iter().copied().max().unwrap_or(0) as usize;
    let device = cuda
        .malloc(largest)
        .map_err(|e| anyhow::anyhow!("cudaMalloc: {e}"))?;
    let pinned = cuda
        .malloc_host(largest)
        .map_err(|e| anyhow::anyhow!("cudaMallocHost: {e}"))?;
    // Touched, as a program's buffers are.
    let mut pageable = vec![1u8; largest];
    let mut model = CostModel::default();
    let curves: [(&mut Curve, *mut c_void, MemcpyKind); 4] = [
        (
            &mut model.h2d_pageable,
            pageable.as_mut_ptr().cast(),
            MemcpyKind::HostToDevice,
        ),
        (&mut model.h2d_pinned, pinned, MemcpyKind::HostToDevice),
        (
            &mut model.d2h_pageable,
            pageable.as_mut_ptr().cast(),
            MemcpyKind::DeviceToHost,
        ),
        (&mut model.d2h_pinned, pinned, MemcpyKind::DeviceToHost),
    ];
    for (curve, host, kind) in curves {
        for (slot, &size) in curve.iter_mut().zip(SIZES.iter()) {
            let size = size as usize;
            let (dst, src) = match kind {
                MemcpyKind::HostToDevice => (device, host.cast_const()),
                _ => (host, device.cast_const()),
            };
            let seconds = median(repeat, || {
                // SAFETY: both buffers hold `largest` >= `size` bytes.
                unsafe { cuda.memcpy(dst, src, size, kind) }.is_ok()
            });
            *slot = size as f64 / seconds.as_secs_f64() / 1e9;
        }
    }
    (model.register, model.unregister) = pinning_costs(&cuda, &mut pageable, repeat)?;
    // SAFETY: allocated above and no longer used.
    unsafe {
        let _ = cuda.free(device);
        let _ = cuda.free_host(pinned);
    }
    model
        .validate()
        .map_err(|why| anyhow::anyhow!("the measurement is unusable: {why}"))?;
    write_cost_file(&cuda, model, args.output)?;
    Ok(ExitCode::SUCCESS)
}

/// What registering and unregistering cost in place, as a fixed part and a part per GiB:
/// measured at two sizes of the touched `pageable` buffer, `repeat` times each (medians).
fn pinning_costs(
    cuda: &CudaRuntime,
    pageable: &mut [u8],
    repeat: usize,
) -> Result<(Linear, Linear)> {
    let fit = |small: Duration, large: Duration, small_size: usize, large_size: usize| {
        let per_byte =
            (large.as_secs_f64() - small.as_secs_f64()).max(0.0) / (large_size - small_size) as f64;
        Linear {
            fixed_s: (small.as_secs_f64() - per_byte * small_size as f64).max(0.0),
            per_gib_s: per_byte * (1u64 << 30) as f64,
        }
    };
    let (small, large) = (1 << 20, 256 << 20);
    let mut register = [Duration::ZERO; 2];
    let mut unregister = [Duration::ZERO; 2];
    for ((size, register), unregister) in [small, large]
        .into_iter()
        .zip(&mut register)
        .zip(&mut unregister)
    {
        let block = pageable
            .get_mut(..size)
            .context("the pageable buffer is smaller than the sizes measured")?;
        let ptr = block.as_mut_ptr().cast::<c_void>();
        let mut pin = Vec::new();
        let mut unpin = Vec::new();
        for _ in 0..repeat {
            let start = Instant::now();
            // SAFETY: a live, touched block of `size` bytes, unregistered again below.
            unsafe { cuda.host_register(ptr, size) }.map_err(|e| anyhow::anyhow!("{e}"))?;
            pin.push(start.elapsed());
            let start = Instant::now();
            // SAFETY: registered just above.
            unsafe { cuda.host_unregister(ptr) }.map_err(|e| anyhow::anyhow!("{e}"))?;
            unpin.push(start.elapsed());
        }
        *register = middle(pin);
        *unregister = middle(unpin);
    }
    Ok((
        fit(register[0], register[1], small, large),
        fit(unregister[0], unregister[1], small, large),
    ))
}

/// Writes the measured `model` as a cost file (`output`, else the default path), and prints it.
fn write_cost_file(
    cuda: &CudaRuntime,
    model: CostModel,
    output: Option<std::path::PathBuf>,
) -> Result<()> {
    let file = CostFile {
        format: COST_FILE_FORMAT.into(),
        source: format!(
            "hotpin calibrate with {} at {} s since the epoch",
            cuda.path(),
            hotpin_history::dump::unix_now()
        ),
        model,
    };
    let path = output
        .or_else(CostModel::default_path)
        .context("no output path: give -o FILE")?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&file)? + "\n";
    hotpin_history::files::write_atomically(&path, text.as_bytes(), 0o644)
        .with_context(|| format!("writing {}", path.display()))?;
    println!("{}", serde_json::to_string_pretty(&file.model)?);
    eprintln!("hotpin: costs written to {}", path.display());
    Ok(())
}

/// The median time of `repeat` runs of `once` (which says whether it worked).
fn median(repeat: usize, mut once: impl FnMut() -> bool) -> Duration {
    let mut times = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        let start = Instant::now();
        if once() {
            times.push(start.elapsed());
        }
    }
    middle(times)
}

fn middle(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times
        .get(times.len() / 2)
        .copied()
        .unwrap_or(Duration::from_secs(1))
        .max(Duration::from_nanos(1))
}
