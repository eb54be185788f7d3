//! What the tracer needs from the kernel, checked up front so the error names what is missing.

use std::fs;

/// `CAP_PERFMON` and `CAP_BPF` (Linux 5.8).
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;
const CAP_SYS_ADMIN: u32 = 21;

/// Why this process cannot load and attach the tracer's programs.
#[derive(Debug, thiserror::Error)]
#[error(
    "the tracer needs {missing}; run it as root or grant them (setcap cap_bpf,cap_perfmon+ep tracer)"
)]
pub struct MissingPrivileges {
    pub missing: String,
}

/// The effective capability set of this process, from /proc/self/status.
fn effective_caps() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
}

/// Ok when root or when CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) are effective.
pub fn check() -> Result<(), MissingPrivileges> {
    let caps = effective_caps().unwrap_or(0);
    let has = |cap: u32| caps & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    let missing: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|(cap, _)| !has(*cap))
        .map(|(_, name)| name)
        .collect();
    Err(MissingPrivileges {
        missing: missing.join(" and "),
    })
}
