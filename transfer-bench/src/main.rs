//! `transfer-bench`: the pattern of the original design's benchmark.
//!
//! H hot host buffers are each copied host-to-device and back N times; C cold buffers are
//! each copied once each way. The CUDA runtime is dlopened (`--cudart`), so the same binary
//! runs against real CUDA or the test stand-in. Prints one JSON summary on stdout.

use std::{ffi::c_void, time::Instant};

use anyhow::{Context as _, Result, bail, ensure};
use clap::{Parser, ValueEnum};
use hotpin::{
    Allocator, Config,
    cuda::{CudaRuntime, MemcpyKind},
};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Mode {
    /// Every host buffer from malloc (pageable).
    Unpinned,
    /// Every host buffer from cudaMallocHost (pinned).
    Pinned,
    /// hotpin's allocator pinning everything while `tracer` records (`tracer record -- ...`).
    Profile,
    /// hotpin's allocator pinning what `--history` says was hot.
    Use,
    /// hotpin's allocator pinning everything (baseline).
    PinAll,
    /// hotpin's allocator pinning nothing (baseline).
    PinNone,
}

impl Mode {
    fn allocator_mode(self) -> Option<hotpin::Mode> {
        match self {
            Mode::Unpinned | Mode::Pinned => None,
            Mode::Profile => Some(hotpin::Mode::Profile),
            Mode::Use => Some(hotpin::Mode::Use),
            Mode::PinAll => Some(hotpin::Mode::PinAll),
            Mode::PinNone => Some(hotpin::Mode::PinNone),
        }
    }
}

#[derive(Parser, Debug)]
#[command(about, version)]
struct Args {
    /// The CUDA runtime to load: a path, or a name for the dynamic loader.
    #[arg(long, default_value = "libcudart.so.13")]
    cudart: String,
    /// How host buffers are allocated.
    #[arg(long, value_enum, default_value_t = Mode::Unpinned)]
    mode: Mode,
    /// Size of every buffer, in bytes (suffixes K, M, G are powers of 1024).
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    size: usize,
    /// Number of hot buffers.
    #[arg(long, default_value_t = 2)]
    hot: usize,
    /// Round trips (host-to-device then device-to-host) per hot buffer.
    #[arg(long, default_value_t = 175)]
    transfers: usize,
    /// Number of cold buffers (one round trip each).
    #[arg(long, default_value_t = 25)]
    cold: usize,
    /// Steps of a training loop after the other copies: each allocates a fresh buffer (from
    /// the same call site), copies it to the device and back, and frees it, as a program
    /// making a fresh host tensor per step does.
    #[arg(long, default_value_t = 0)]
    steps: usize,
    /// Microseconds each step sleeps after its copies (the rest of a training step).
    #[arg(long, default_value_t = 0, value_name = "US")]
    step_pause_us: u64,
    /// The history for `--mode use` (written by `tracer record`).
    #[arg(long, value_name = "FILE")]
    history: Option<std::path::PathBuf>,
    /// Most bytes the allocator may pin (bytes, or a share of RAM like 10%).
    #[arg(long, value_name = "BYTES")]
    pinned_budget: Option<String>,
    /// Pin this much with cudaMallocHost before anything else and hold it to the end: memory
    /// another part of the program pinned already (the original's pre-pinned variant).
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    prepin: Option<usize>,
}

fn parse_size(text: &str) -> Result<usize, String> {
    hotpin_history::units::parse_bytes(text)?
        .try_into()
        .ok()
        .filter(|&size: &usize| size > 0)
        .ok_or_else(|| format!("size {text:?} is zero or too large"))
}

#[derive(Serialize)]
struct Summary {
    mode: Mode,
    cudart: String,
    size: usize,
    hot: usize,
    cold: usize,
    transfers: usize,
    steps: usize,
    /// Pinned before the run and held (`--prepin`), not counted in `bytes_pinned`.
    prepinned_bytes: u64,
    /// Host-to-device plus device-to-host calls made.
    copies: usize,
    bytes_moved: u64,
    bytes_allocated: u64,
    bytes_pinned: u64,
    /// hotpin's counters, in allocator modes.
    allocator: Option<AllocatorStats>,
    alloc_s: f64,
    copy_s: f64,
    free_s: f64,
    total_s: f64,
}

#[derive(Serialize)]
struct AllocatorStats {
    pinned_allocations: u64,
    pageable_allocations: u64,
    peak_pinned_bytes: u64,
    fallbacks: u64,
    cache_hits: u64,
    pin_time_s: f64,
}

/// A host buffer and how to give it back.
enum HostBuffer {
    Malloc(*mut c_void),
    CudaHost(*mut c_void),
    Hotpin(hotpin::HostBuffer),
}

impl HostBuffer {
    fn ptr(&self) -> *mut c_void {
        match self {
            HostBuffer::Malloc(ptr) | HostBuffer::CudaHost(ptr) => *ptr,
            HostBuffer::Hotpin(buffer) => buffer.as_ptr().cast(),
        }
    }
}

/// Every buffer comes from here: one call site, so the allocator tells them apart by ordinal.
fn alloc_host(
    cuda: &CudaRuntime,
    allocator: Option<&'static Allocator>,
    mode: Mode,
    size: usize,
) -> Result<HostBuffer> {
    let buffer = match (mode, allocator) {
        (_, Some(allocator)) => HostBuffer::Hotpin(
            allocator
                .alloc(size)
                .ok_or_else(|| anyhow::anyhow!("hotpin_malloc({size}) failed"))?,
        ),
        (Mode::Pinned, None) => HostBuffer::CudaHost(
            cuda.malloc_host(size)
                .map_err(|e| anyhow::anyhow!("cudaMallocHost({size}): {e}"))?,
        ),
        (_, None) => {
            // SAFETY: plain malloc; checked for null below.
            let ptr = unsafe { libc::malloc(size) };
            ensure!(!ptr.is_null(), "malloc({size}) failed");
            HostBuffer::Malloc(ptr)
        }
    };
    // Touch every page, as a program filling its buffer would.
    // SAFETY: the buffer is valid for `size` bytes.
    unsafe { std::ptr::write_bytes(buffer.ptr().cast::<u8>(), 0xa5, size) };
    Ok(buffer)
}

fn free_host(cuda: &CudaRuntime, buffer: HostBuffer) -> Result<()> {
    match buffer {
        // SAFETY: from cudaMallocHost, freed once.
        HostBuffer::CudaHost(ptr) => {
            unsafe { cuda.free_host(ptr) }.map_err(|e| anyhow::anyhow!("cudaFreeHost: {e}"))
        }
        HostBuffer::Malloc(ptr) => {
            // SAFETY: from malloc, freed once.
            unsafe { libc::free(ptr) };
            Ok(())
        }
        HostBuffer::Hotpin(buffer) => {
            drop(buffer);
            Ok(())
        }
    }
}

fn set_up_allocator(args: &Args) -> Result<Option<&'static Allocator>> {
    let Some(mode) = args.mode.allocator_mode() else {
        return Ok(None);
    };
    let mut config = Config::new(mode);
    config.cudart = args.cudart.clone();
    config.history = args.history.clone();
    if let Some(budget) = &args.pinned_budget {
        config.pinned_budget = Some(hotpin::parse_budget(budget)?);
    }
    Ok(Some(Allocator::init(config)?))
}

fn round_trip(
    cuda: &CudaRuntime,
    host: &HostBuffer,
    device: *mut c_void,
    size: usize,
) -> Result<()> {
    // SAFETY: both buffers are `size` bytes, host memory and device memory respectively.
    unsafe {
        cuda.memcpy(device, host.ptr(), size, MemcpyKind::HostToDevice)
            .map_err(|e| anyhow::anyhow!("cudaMemcpy host-to-device: {e}"))?;
        cuda.memcpy(host.ptr(), device, size, MemcpyKind::DeviceToHost)
            .map_err(|e| anyhow::anyhow!("cudaMemcpy device-to-host: {e}"))?;
    }
    Ok(())
}

fn run(args: &Args) -> Result<Summary> {
    let cuda = CudaRuntime::load(&args.cudart)?;
    let devices = cuda
        .device_count()
        .map_err(|e| anyhow::anyhow!("cudaGetDeviceCount: {e}"))?;
    if devices == 0 {
        bail!("{} reports no CUDA device", cuda.path());
    }
    let size = args.size;
    let device = cuda
        .malloc(size)
        .map_err(|e| anyhow::anyhow!("cudaMalloc({size}): {e}"))?;

    let prepinned = match args.prepin {
        Some(bytes) => Some(
            cuda.malloc_host(bytes)
                .map_err(|e| anyhow::anyhow!("cudaMallocHost({bytes}) for --prepin: {e}"))?,
        ),
        None => None,
    };
    let allocator = set_up_allocator(args)?;
    let start = Instant::now();
    let hot = (0..args.hot)
        .map(|_| alloc_host(&cuda, allocator, args.mode, size))
        .collect::<Result<Vec<_>>>()?;
    let cold = (0..args.cold)
        .map(|_| alloc_host(&cuda, allocator, args.mode, size))
        .collect::<Result<Vec<_>>>()?;
    let allocated = start.elapsed();

    let copy_start = Instant::now();
    copy_all(args, &cuda, allocator, device, &hot, &cold)?;
    let copied = copy_start.elapsed();
    for buffer in hot.iter().chain(&cold) {
        // SAFETY: every buffer is at least one byte.
        let first = unsafe { *buffer.ptr().cast::<u8>() };
        ensure!(
            first == 0xa5,
            "a buffer came back changed from its round trips"
        );
    }

    let free_start = Instant::now();
    let stats = allocator.map(Allocator::stats);
    let pinned_bytes = match (args.mode, stats) {
        (_, Some(stats)) => stats.peak_pinned_bytes,
        // The most held at once: the step buffer lives beside the others.
        (Mode::Pinned, None) => ((args.hot + args.cold + args.steps.min(1)) * size) as u64,
        _ => 0,
    };
    for buffer in hot.into_iter().chain(cold) {
        free_host(&cuda, buffer)?;
    }
    // hotpin keeps freed pinned blocks for reuse; give them back inside the timing, so its
    // unpinning is counted like cudaFreeHost is for --mode pinned.
    if let Some(allocator) = allocator {
        allocator.trim();
    }
    let freed = free_start.elapsed();
    // SAFETY: from cudaMalloc, freed once.
    unsafe { cuda.free(device) }.map_err(|e| anyhow::anyhow!("cudaFree: {e}"))?;
    if let Some(ptr) = prepinned {
        // SAFETY: from cudaMallocHost, freed once.
        unsafe { cuda.free_host(ptr) }.map_err(|e| anyhow::anyhow!("cudaFreeHost: {e}"))?;
    }

    Ok(summary(
        args,
        &cuda,
        stats,
        pinned_bytes,
        [allocated, copied, freed, start.elapsed()],
    ))
}

/// The copies: each hot buffer `--transfers` times, each cold one once, then a fresh buffer
/// per step; all finished on the device before it returns.
fn copy_all(
    args: &Args,
    cuda: &CudaRuntime,
    allocator: Option<&'static Allocator>,
    device: *mut c_void,
    hot: &[HostBuffer],
    cold: &[HostBuffer],
) -> Result<()> {
    let size = args.size;
    for _ in 0..args.transfers {
        for buffer in hot {
            round_trip(cuda, buffer, device, size)?;
        }
    }
    for buffer in cold {
        round_trip(cuda, buffer, device, size)?;
    }
    for _ in 0..args.steps {
        let buffer = alloc_host(cuda, allocator, args.mode, size)?;
        round_trip(cuda, &buffer, device, size)?;
        free_host(cuda, buffer)?;
        if args.step_pause_us > 0 {
            std::thread::sleep(std::time::Duration::from_micros(args.step_pause_us));
        }
    }
    cuda.device_synchronize()
        .map_err(|e| anyhow::anyhow!("cudaDeviceSynchronize: {e}"))
}

/// What the run did and took: `[allocation, copies, frees, all]`.
fn summary(
    args: &Args,
    cuda: &CudaRuntime,
    stats: Option<hotpin::Stats>,
    pinned_bytes: u64,
    [allocated, copied, freed, total]: [std::time::Duration; 4],
) -> Summary {
    let copies = 2 * (args.hot * args.transfers + args.cold + args.steps);
    let size = args.size;
    Summary {
        mode: args.mode,
        cudart: cuda.path().to_string(),
        size,
        hot: args.hot,
        cold: args.cold,
        transfers: args.transfers,
        steps: args.steps,
        prepinned_bytes: args.prepin.unwrap_or(0) as u64,
        copies,
        bytes_moved: copies as u64 * size as u64,
        bytes_allocated: ((args.hot + args.cold + args.steps) * size) as u64,
        bytes_pinned: pinned_bytes,
        allocator: stats.map(|s| AllocatorStats {
            pinned_allocations: s.pinned_allocations,
            pageable_allocations: s.pageable_allocations,
            peak_pinned_bytes: s.peak_pinned_bytes,
            fallbacks: s.fallback_budget
                + s.fallback_pin_failed
                + s.fallback_no_cuda
                + s.fallback_pressure,
            cache_hits: s.cache_hits,
            pin_time_s: s.pin_time_ns as f64 * 1e-9,
        }),
        alloc_s: allocated.as_secs_f64(),
        copy_s: copied.as_secs_f64(),
        free_s: freed.as_secs_f64(),
        total_s: total.as_secs_f64(),
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let summary = run(&args).context("transfer-bench failed")?;
    println!("{}", serde_json::to_string(&summary)?);
    Ok(())
}
