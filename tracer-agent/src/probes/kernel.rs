//! The oldest kernel the tracer runs on, checked before anything is loaded.

use crate::error::TracerError;

/// Attach cookies on uprobes (`bpf_get_attach_cookie`, which tells the one generic program
/// which function it sits on) arrived in Linux 5.15; BPF ring buffers (5.8) and user build-id
/// stacks are older.
pub const MINIMUM: (u32, u32) = (5, 15);

/// The running kernel's release string (`uname -r`).
pub fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// (major, minor) of a release string like `6.1.0-37-amd64` or `5.15.0-119-generic`.
pub fn version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Refuses a kernel older than [`MINIMUM`], with a message that says why. A release string
/// that cannot be read is let through: the load itself will tell.
pub fn check() -> Result<(), TracerError> {
    let release = release();
    match version(&release) {
        Some(found) if found < MINIMUM => Err(TracerError::KernelTooOld {
            release,
            minimum: format!("{}.{}", MINIMUM.0, MINIMUM.1),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distribution_release_strings_give_major_and_minor() {
        assert_eq!(version("6.1.0-37-amd64"), Some((6, 1)));
        assert_eq!(version("5.15.0-119-generic"), Some((5, 15)));
        assert_eq!(version("6.18.44-fc-v782"), Some((6, 18)));
        assert_eq!(version("garbage"), None);
        assert!(version("5.4.0-200-generic").unwrap() < MINIMUM);
        assert!(version("5.15.0-1-generic").unwrap() >= MINIMUM);
    }

    #[test]
    fn the_kernel_running_the_tests_is_accepted() {
        check().expect("CI's and the GPU machine's kernels are new enough");
    }
}
