//! `uprobe_multi` links (Linux 6.6+): one link attaches a program to many offsets of one file,
//! each with its own cookie, and one detach releases them all with a single wait in the
//! kernel. A perf-event uprobe link costs about 75 ms to detach, serialised in the kernel, so
//! a full registry took seconds to stop; see docs/benchmarks.md for both.
//!
//! aya 0.14 cannot create these links: the program is loaded with `UProbe::load_multi` (our
//! addition to the vendored aya, vendor/README.md) and the link is made here with the
//! `bpf(BPF_LINK_CREATE)` system call on the program's descriptor.

use std::{
    ffi::CString,
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
    os::unix::ffi::OsStrExt as _,
    path::Path,
};

/// The first kernel with `uprobe_multi` links.
pub const SINCE: (u32, u32) = (6, 6);

const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_TRACE_UPROBE_MULTI: u32 = 48;
const BPF_F_UPROBE_MULTI_RETURN: u32 = 1;

/// `union bpf_attr`'s `link_create` member as `BPF_TRACE_UPROBE_MULTI` uses it
/// (include/uapi/linux/bpf.h), padded with zeros the kernel checks.
#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    path: u64,
    offsets: u64,
    ref_ctr_offsets: u64,
    cookies: u64,
    cnt: u32,
    multi_flags: u32,
    pid: u32,
    _pad: [u32; 17],
}

/// Attaches `program` (loaded for multi links) to `offsets` of `path`, each with the cookie
/// at the same index, for every process; `ret` for a return probe. The link lives as long as
/// the descriptor.
pub fn attach(
    program: BorrowedFd<'_>,
    path: &Path,
    offsets: &[u64],
    cookies: &[u64],
    ret: bool,
) -> std::io::Result<OwnedFd> {
    assert_eq!(offsets.len(), cookies.len());
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let attr = LinkCreate {
        prog_fd: program.as_raw_fd() as u32,
        attach_type: BPF_TRACE_UPROBE_MULTI,
        path: path.as_ptr() as u64,
        offsets: offsets.as_ptr() as u64,
        cookies: cookies.as_ptr() as u64,
        cnt: offsets.len() as u32,
        multi_flags: if ret { BPF_F_UPROBE_MULTI_RETURN } else { 0 },
        ..LinkCreate::default()
    };
    // SAFETY: `attr` is a zero-padded bpf_attr for BPF_LINK_CREATE whose pointers (path,
    // offsets, cookies) stay valid for the call; the kernel copies what it needs.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_CREATE,
            &raw const attr,
            size_of::<LinkCreate>() as u32,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attribute_has_the_kernel_layout() {
        assert_eq!(std::mem::offset_of!(LinkCreate, path), 16);
        assert_eq!(std::mem::offset_of!(LinkCreate, cookies), 40);
        assert_eq!(std::mem::offset_of!(LinkCreate, cnt), 48);
        assert_eq!(std::mem::offset_of!(LinkCreate, multi_flags), 52);
        assert_eq!(std::mem::offset_of!(LinkCreate, pid), 56);
        assert_eq!(size_of::<LinkCreate>(), 128);
    }
}
