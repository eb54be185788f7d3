//! Profile mode with the tracer embedded in the process, then the history it saves. Needs
//! root: the embedded tracer loads eBPF programs. Uses the CUDA stand-in (a test fixture).

use hotpin::{
    Config,
    cuda::{CudaRuntime, MemcpyKind},
};
use hotpin_history::history::AllocKind;

#[test]
fn an_embedded_profile_records_each_buffer_with_its_transfers() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test loads eBPF programs: run it as root"
    );
    let standin = cuda_standin::Scratch::new("embedded").expect("install the stand-in");
    let dir = standin.dir.clone();
    // Loaded first so the stand-in runtime's dlopen("libcuda.so.1") finds it by soname.
    // SAFETY: the stand-in's initialisers are trivial.
    let driver = unsafe { libloading::Library::new(&standin.driver) }.expect("load the driver");
    let mut config = Config::new(hotpin::Mode::Profile);
    config.cudart = standin.runtime.display().to_string();
    let history = dir.join("embedded.hotpin");
    let allocator = hotpin_embedded::profile(config, &history).expect("start profiling");

    let cuda = CudaRuntime::load(&standin.runtime).expect("load the runtime");
    const SIZE: usize = 64 * 1024;
    let device = cuda.malloc(SIZE).expect("cudaMalloc");
    let buffers: Vec<_> = (0..3)
        .map(|_| allocator.alloc(SIZE).expect("allocate"))
        .collect();
    for (buffer, round_trips) in buffers.iter().zip([10, 10, 1]) {
        for _ in 0..round_trips {
            // SAFETY: both are SIZE bytes, host and device memory respectively.
            unsafe {
                cuda.memcpy(
                    device,
                    buffer.as_ptr().cast(),
                    SIZE,
                    MemcpyKind::HostToDevice,
                )
                .expect("copy");
                cuda.memcpy(
                    buffer.as_ptr().cast(),
                    device,
                    SIZE,
                    MemcpyKind::DeviceToHost,
                )
                .expect("copy");
            }
        }
    }
    drop(buffers);
    let saved = hotpin_embedded::save().expect("save the history");
    let history = hotpin_history::dump::read(&saved).expect("read it back");
    let ours: Vec<_> = history
        .allocations()
        .iter()
        .filter(|a| a.kind == AllocKind::Pinned && a.size == SIZE as u64 && a.call_site.is_some())
        .collect();
    let transfers: Vec<_> = ours
        .iter()
        .map(|a| (a.ordinal, a.stats.transfers))
        .collect();
    assert_eq!(
        transfers,
        vec![(0, 20), (1, 20), (2, 2)],
        "each buffer with its own transfers"
    );
    drop(driver);
}
