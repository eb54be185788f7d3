//! libc's allocator: the floor applied in the kernel, and which blocks' frees are worth sending.

use aya_ebpf::{macros::map, maps::LruHashMap};
use tracer_common::{EventKind, MAX_ARGS, ProbeCookie, config};

use crate::shared::{CONFIG, arg_at};

/// libc allocations at or above the floor, by (process, pointer): their frees are sent, no
/// other frees are.
#[map]
static LIBC_LIVE: LruHashMap<LibcBlock, u8> = LruHashMap::with_max_entries(1 << 16, 0);

#[repr(C)]
#[derive(Clone, Copy)]
struct LibcBlock {
    tgid: u32,
    _pad: u32,
    ptr: u64,
}

fn libc_block(tgid: u32, ptr: u64) -> LibcBlock {
    LibcBlock { tgid, _pad: 0, ptr }
}

/// Whether a libc allocator call is worth sending: an allocation of at least the floor, or a
/// free (or realloc) of one that was.
pub(crate) fn libc_call_wanted(tgid: u32, cookie: ProbeCookie, args: &[u64; MAX_ARGS]) -> bool {
    let floor = CONFIG.get(config::MALLOC_FLOOR).copied().unwrap_or(0);
    let arg = |index: Option<usize>| index.map(|i| arg_at(args, i));
    let size = match (arg(cookie.size_arg()), arg(cookie.count_arg())) {
        // BPF has no 128-bit multiply (saturating_mul needs one): two factors under 2^32
        // cannot overflow, and a factor above is past any floor anyway.
        (Some(size), Some(count)) if (size | count) >> 32 != 0 => u64::MAX,
        (Some(size), Some(count)) => size * count,
        (Some(size), None) => size,
        _ => 0,
    };
    let tracked = |ptr: u64| {
        // SAFETY: only tested for presence.
        ptr != 0 && unsafe { LIBC_LIVE.get(libc_block(tgid, ptr)) }.is_some()
    };
    let kind = cookie.kind();
    if kind == EventKind::Free as u16 {
        tracked(args[0])
    } else if kind == EventKind::Realloc as u16 {
        size >= floor || tracked(args[0])
    } else {
        size >= floor
    }
}

/// Keeps the pointer a libc allocation returned (so its free is sent) and forgets a freed one.
pub(crate) fn track_libc_block(
    tgid: u32,
    cookie: ProbeCookie,
    args: &[u64; MAX_ARGS],
    ret: u64,
    out: u64,
) {
    let kind = cookie.kind();
    if kind == EventKind::Free as u16 || kind == EventKind::Realloc as u16 {
        let _ = LIBC_LIVE.remove(libc_block(tgid, args[0]));
        if kind == EventKind::Free as u16 {
            return;
        }
    }
    let ptr = if cookie.out_arg().is_some() { out } else { ret };
    if ptr != 0 {
        let _ = LIBC_LIVE.insert(libc_block(tgid, ptr), 1, 0);
    }
}
