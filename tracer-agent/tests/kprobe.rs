//! The kprobe path, on a kernel that has kprobes (Debian's and Ubuntu's do; this project's own
//! machines do not): `cargo xtask vm-test` runs this binary inside QEMU guests of Debian's
//! kernels. Needs root. The NVIDIA module is absent there, so the mechanism is proven on a
//! kernel function the test itself triggers, and the NVIDIA kprobes must say why they are
//! unavailable.

use std::{os::fd::AsRawFd as _, path::Path};

use hotpin_registry::registry;
use tracer_agent::probes::{ProbeOptions, ProbeState, ProbeTarget, Probes};
use tracer_common::{Event, EventKind};

#[test]
fn a_registry_kprobe_attaches_and_reports_calls_where_the_kernel_has_kprobes() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "loads eBPF programs: run as root"
    );
    assert!(
        Path::new("/sys/bus/event_source/devices/kprobe").exists(),
        "this test is for kernels with kprobes; `cargo xtask vm-test` runs it in one"
    );
    let mut probes = Probes::load(1 << 20, ProbeOptions::default()).expect("load");
    // The NVIDIA driver's functions are not in this kernel: each says so.
    for probe in registry::KPROBE_PROBES {
        let status = probes
            .status()
            .iter()
            .find(|s| s.symbol == probe.program)
            .expect("every registry kprobe has a status");
        match &status.state {
            ProbeState::Unavailable { reason } => {
                println!("{}: unavailable: {reason}", probe.function);
                assert!(!reason.is_empty());
            }
            ProbeState::Attached => panic!("{} attached without the NVIDIA module", probe.function),
        }
    }
    // The same program on do_sys_openat2(dfd, filename, how): its first argument is the
    // directory fd this test passes, so the events are ours and countable.
    let program = registry::KPROBE_PROBES[0].program;
    let state = probes.attach_kprobe_program_to(program, "do_sys_openat2");
    assert_eq!(state, ProbeState::Attached, "kprobe on do_sys_openat2");
    assert!(probes.status().iter().any(|s| s.target
        == ProbeTarget::Kprobe {
            function: "do_sys_openat2"
        }
        && s.state == ProbeState::Attached));
    probes
        .add_target(std::process::id())
        .expect("trace this process");
    let mut ring = probes.take_events().expect("ring buffer");
    let dir = std::fs::File::open("/").expect("open /");
    let dfd = dir.as_raw_fd();
    const OPENS: usize = 25;
    for _ in 0..OPENS {
        // SAFETY: a constant NUL-terminated path; the result is checked, the fd closed.
        let fd = unsafe { libc::openat(dfd, c"hotpin-kprobe-check-missing".as_ptr(), 0) };
        if fd >= 0 {
            // SAFETY: our own fd.
            unsafe { libc::close(fd) };
        }
    }
    let mut seen = 0;
    while let Some(record) = ring.next() {
        let event = Event::from_bytes(&record).expect("a whole event");
        if event.kind() == Some(EventKind::DriverLockPages) && event.args[0] == dfd as u64 {
            seen += 1;
        }
    }
    println!("kprobe do_sys_openat2: {seen} of {OPENS} calls seen");
    assert_eq!(seen, OPENS, "every call through the kprobe, none lost");
}
