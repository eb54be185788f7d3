//! Decoding ring-buffer records into typed CUDA calls, with the registry.

use tracer_common::{
    Event, EventKind, FLAG_AT_ENTRY, FLAG_FOR_MAPPING, FLAG_NESTED, FLAG_NO_ENTRY,
    FLAG_OUT_UNREADABLE, SITE_BUILD_ID, SITE_IP,
};

use crate::registry::{
    AllocSpace, BytesFrom, CopyDirection, DirectionFrom, Library, PtrFrom, Semantics, call_probe,
};

/// What a CUDA call did to memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Alloc {
        addr: u64,
        size: u64,
        space: AllocSpace,
    },
    Free {
        addr: u64,
        space: AllocSpace,
    },
    Register {
        addr: u64,
        size: u64,
    },
    Unregister {
        addr: u64,
    },
    /// `realloc`: the block at `old` (0: none) ends; one of `size` bytes starts at `addr`.
    Realloc {
        old: u64,
        addr: u64,
        size: u64,
    },
    /// hotpin's allocator is handing out a pinned block at `addr`.
    MarkPinned {
        addr: u64,
    },
    Copy {
        dst: u64,
        src: u64,
        bytes: u64,
        direction: CopyDirection,
    },
    /// Managed memory at `addr` migrated to the device (or to the host).
    Prefetch {
        addr: u64,
        bytes: u64,
        to_device: bool,
    },
    /// A call with no effect on tracked memory (cuMemCreate, cuMemRelease): counted only.
    Counted,
}

/// A call site as the kernel resolved it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawSite {
    /// The module's ELF build id and the file offset in it.
    BuildId { build_id: [u8; 20], offset: u64 },
    /// Only the address (the module has no build id, or it could not be read).
    Address(u64),
}

/// One completed call of a traced process to a probed function: CUDA's runtime and
/// driver, libc's allocator (when traced), and hotpin's own markers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiCall {
    pub kind: EventKind,
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC at return, in ns.
    pub ts_ns: u64,
    pub duration_ns: u64,
    /// The call site: the return address in the caller.
    pub caller: u64,
    /// The call site resolved by the kernel, for allocation calls.
    pub site: Option<RawSite>,
    /// The user stack's id in the kernel's `STACKS` map, for allocation calls: the callers.
    pub stack: Option<u32>,
    /// `cudaError_t` or `CUresult`; 0 is success.
    pub result: i32,
    /// A driver call made inside a runtime call: the runtime call stands for it.
    pub nested: bool,
    /// The return was seen without the entry: the arguments are unknown.
    pub partial: bool,
    /// How many identical calls in a row this stands for (a driver copy repeated with the
    /// same arguments is counted in the kernel and sent once); 1 for every other call.
    pub repeat: u32,
    /// The stream an asynchronous copy was queued on (`cudaStream_t`/`CUstream`, 0 for the
    /// default stream or where the registry has no stream argument).
    pub stream: u64,
    pub op: Op,
}

/// Why a record could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("ring-buffer record of {len} bytes is shorter than its kind")]
    Truncated { len: usize },
    #[error("unknown event kind {0}")]
    UnknownKind(u16),
}

impl From<tracer_common::DecodeError> for DecodeError {
    fn from(error: tracer_common::DecodeError) -> Self {
        match error {
            tracer_common::DecodeError::Truncated { len } => DecodeError::Truncated { len },
        }
    }
}

/// Any event from the kernel side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// A probed function's call (CUDA, libc's allocator, hotpin).
    Call(ApiCall),
    /// A target opened a file named `libcud*` as `fd`; it may be stopped until the agent has
    /// looked at it.
    LibraryOpen { pid: u32, fd: i32 },
    /// The NVIDIA driver pinned (`locked`) or unpinned `pages` pages for a target (kprobes).
    DriverPages { pid: u32, locked: bool, pages: u64 },
    /// A host memory syscall made outside CUDA and hotpin calls (those are `nested`: the call
    /// accounts for its memory).
    HostMemory {
        pid: u32,
        /// The thread that made it (its Python lines, if sent, are that thread's).
        tid: u32,
        ts_ns: u64,
        nested: bool,
        /// The syscall failed (its memory did not change).
        failed: bool,
        op: HostOp,
    },
    /// `pages` user page faults by one thread on consecutive pages from `addr`.
    PageFaults {
        pid: u32,
        ts_ns: u64,
        addr: u64,
        pages: u64,
    },
    /// An ioctl of the NVIDIA driver's kind; `cmd` is its full command.
    NvidiaIoctl { pid: u32, cmd: u32 },
    /// Traced process `pid` made child process `child`, traced from now on.
    ProcessFork { pid: u32, child: u32 },
    /// Thread `tid`'s Python frames at the entry of its next allocation, or of a large
    /// mapping: the first `count` of `frames`, innermost first, each a code object and an
    /// instruction (`tracer_common::python::unpack`). What the code objects say comes in
    /// [`python_code`]'s records, or is read from the process.
    PythonFrames {
        pid: u32,
        tid: u32,
        /// Sent for a large mapping (`FLAG_FOR_MAPPING`), not for an allocation call.
        for_mapping: bool,
        count: u8,
        frames: [u64; tracer_common::python::PY_FRAMES],
    },
}

impl TraceEvent {
    /// The process the event is about (the parent, for a fork).
    pub fn pid(&self) -> u32 {
        match *self {
            TraceEvent::Call(ApiCall { pid, .. })
            | TraceEvent::LibraryOpen { pid, .. }
            | TraceEvent::DriverPages { pid, .. }
            | TraceEvent::HostMemory { pid, .. }
            | TraceEvent::PageFaults { pid, .. }
            | TraceEvent::NvidiaIoctl { pid, .. }
            | TraceEvent::ProcessFork { pid, .. }
            | TraceEvent::PythonFrames { pid, .. } => pid,
        }
    }
}

/// What a host memory syscall did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostOp {
    Map {
        addr: u64,
        len: u64,
    },
    Unmap {
        addr: u64,
        len: u64,
    },
    Remap {
        old_addr: u64,
        old_len: u64,
        new_addr: u64,
        new_len: u64,
    },
    /// The program break is now `end` (`brk`'s return, whether or not the move asked for
    /// succeeded).
    Break {
        end: u64,
    },
}

impl HostOp {
    pub fn syscall(self) -> &'static str {
        match self {
            HostOp::Map { .. } => "mmap",
            HostOp::Unmap { .. } => "munmap",
            HostOp::Remap { .. } => "mremap",
            HostOp::Break { .. } => "brk",
        }
    }
}

/// The host memory syscall in `event`, if it is one.
fn host_memory(event: &Event, kind: EventKind) -> Option<TraceEvent> {
    let a = &event.args;
    let ret = event.ret;
    // A syscall's -errno is within the last page of the address space.
    let error = (ret as i64) < 0 && (ret as i64) >= -4095;
    let (op, failed) = match kind {
        EventKind::Mmap => (
            HostOp::Map {
                addr: ret,
                len: a[1],
            },
            error,
        ),
        EventKind::Munmap => (
            HostOp::Unmap {
                addr: a[0],
                len: a[1],
            },
            ret != 0,
        ),
        EventKind::Mremap => (
            HostOp::Remap {
                old_addr: a[0],
                old_len: a[1],
                new_addr: ret,
                new_len: a[2],
            },
            error,
        ),
        // brk(0) asks where the break is; brk(x) that fails returns the old break.
        EventKind::Brk => (HostOp::Break { end: ret }, a[0] != 0 && ret != a[0]),
        _ => return None,
    };
    Some(TraceEvent::HostMemory {
        pid: event.header.pid,
        tid: event.header.tid,
        ts_ns: event.header.ts_ns,
        nested: event.header.flags & FLAG_NESTED != 0,
        failed,
        op,
    })
}

/// A ring-buffer record that says what a Python code object says (longer than an event, and
/// not one): `None` for any other record.
pub fn python_code(
    record: &[u8],
) -> Option<Result<tracer_common::python::PythonCode, DecodeError>> {
    let kind = u16::from_le_bytes([*record.first()?, *record.get(1)?]);
    (kind == EventKind::PythonCode as u16)
        .then(|| tracer_common::python::PythonCode::from_bytes(record).map_err(Into::into))
}

/// Decodes one ring-buffer record ([`python_code`]'s records apart).
pub fn decode(record: &[u8]) -> Result<TraceEvent, DecodeError> {
    let event = Event::from_bytes(record)?;
    if event.kind() == Some(EventKind::LibraryOpen) {
        return Ok(TraceEvent::LibraryOpen {
            pid: event.header.pid,
            fd: event.args[0] as i32,
        });
    }
    match event.kind() {
        Some(EventKind::DriverLockPages) => {
            return Ok(TraceEvent::DriverPages {
                pid: event.header.pid,
                locked: true,
                pages: event.args[1],
            });
        }
        Some(EventKind::DriverUnlockPages) => {
            return Ok(TraceEvent::DriverPages {
                pid: event.header.pid,
                locked: false,
                pages: event.args[0],
            });
        }
        Some(EventKind::PageFaults) => {
            return Ok(TraceEvent::PageFaults {
                pid: event.header.pid,
                ts_ns: event.header.ts_ns,
                addr: event.args[0],
                pages: event.args[1],
            });
        }
        Some(EventKind::ProcessFork) => {
            return Ok(TraceEvent::ProcessFork {
                pid: event.header.pid,
                child: event.args[0] as u32,
            });
        }
        Some(EventKind::PythonFrames) => {
            return Ok(TraceEvent::PythonFrames {
                pid: event.header.pid,
                tid: event.header.tid,
                for_mapping: event.header.flags & FLAG_FOR_MAPPING != 0,
                count: event.ret.min(tracer_common::python::PY_FRAMES as u64) as u8,
                frames: event.args,
            });
        }
        Some(EventKind::NvidiaIoctl) => {
            return Ok(TraceEvent::NvidiaIoctl {
                pid: event.header.pid,
                cmd: event.args[1] as u32,
            });
        }
        Some(kind) => {
            if let Some(host) = host_memory(&event, kind) {
                return Ok(host);
            }
        }
        None => {}
    }
    decode_event(&event).map(TraceEvent::Call)
}

fn bytes_of(args: &[u64; tracer_common::MAX_ARGS], from: BytesFrom) -> u64 {
    match from {
        BytesFrom::Arg(index) => args[index],
        BytesFrom::Rect { width, height } => args[width].saturating_mul(args[height]),
        // The kernel side replaced the pitch's pointer with the pitch.
        BytesFrom::PitchRows { pitch, height } => args[pitch].saturating_mul(args[height]),
        BytesFrom::Volume {
            width,
            height,
            depth,
        } => args[width]
            .saturating_mul(args[height])
            .saturating_mul(args[depth]),
    }
}

/// A copy described by a driver structure: each side's pointer by its memory type, and the
/// direction where both types say it (unified memory is placed later, by its address).
fn described_copy(args: &[u64; tracer_common::MAX_ARGS], bytes: BytesFrom) -> Op {
    use crate::registry::{described::*, described_side};
    let types = args[MEMORY_TYPES];
    let (src, src_device) = described_side(types as u32, args[SRC_HOST], args[SRC_DEVICE]);
    let (dst, dst_device) = described_side((types >> 32) as u32, args[DST_HOST], args[DST_DEVICE]);
    let direction = match (src_device, dst_device) {
        (Some(false), Some(true)) => CopyDirection::HostToDevice,
        (Some(true), Some(false)) => CopyDirection::DeviceToHost,
        (Some(true), Some(true)) => CopyDirection::DeviceToDevice,
        (Some(false), Some(false)) => CopyDirection::HostToHost,
        _ => CopyDirection::Unresolved,
    };
    Op::Copy {
        dst,
        src,
        bytes: bytes_of(args, bytes),
        direction,
    }
}

/// Reads a CUDA call's arguments with its registry row.
pub fn decode_event(event: &Event) -> Result<ApiCall, DecodeError> {
    let raw_kind = event.header.kind;
    let kind = event.kind().ok_or(DecodeError::UnknownKind(raw_kind))?;
    let probe = call_probe(kind).ok_or(DecodeError::UnknownKind(raw_kind))?;
    let args = &event.args;
    let op = op_of(probe, event);
    Ok(ApiCall {
        kind,
        pid: event.header.pid,
        tid: event.header.tid,
        ts_ns: event.header.ts_ns,
        duration_ns: event.duration_ns,
        caller: event.caller,
        site: site_of(event),
        stack: event.site.stack.checked_sub(1),
        result: result_of(probe, event),
        nested: event.header.flags & FLAG_NESTED != 0,
        partial: event.header.flags & FLAG_NO_ENTRY != 0,
        stream: probe
            .stream
            .and_then(|index| args.get(index as usize).copied())
            .unwrap_or(0),
        repeat: if event.header.flags & FLAG_AT_ENTRY != 0 {
            u32::try_from(event.out.max(1)).unwrap_or(u32::MAX)
        } else {
            1
        },
        op,
    })
}

/// What the call did, read from its arguments as the registry says.
fn op_of(probe: &crate::registry::CallProbe, event: &Event) -> Op {
    let args = &event.args;
    match probe.semantics {
        Semantics::Alloc { ptr, size, space } => Op::Alloc {
            addr: match ptr {
                PtrFrom::Ret => event.ret,
                PtrFrom::Out(_) if event.header.flags & FLAG_OUT_UNREADABLE != 0 => 0,
                PtrFrom::Out(_) => event.out,
                PtrFrom::Arg(index) => args[index as usize],
            },
            size: bytes_of(args, size),
            space,
        },
        Semantics::Realloc { ptr, size } => Op::Realloc {
            old: args[ptr],
            addr: event.ret,
            size: args[size],
        },
        Semantics::Free { ptr, space } => Op::Free {
            addr: args[ptr],
            space,
        },
        Semantics::Register { ptr, size } => Op::Register {
            addr: args[ptr],
            size: args[size],
        },
        Semantics::Unregister { ptr } => Op::Unregister { addr: args[ptr] },
        Semantics::Prefetch {
            ptr,
            bytes,
            location,
        } => Op::Prefetch {
            addr: args[ptr],
            bytes: args[bytes],
            to_device: crate::registry::prefetch_to_device(args[location]),
        },
        Semantics::Counted => Op::Counted,
        Semantics::DescribedCopy { bytes } => described_copy(args, bytes),
        Semantics::MarkPinned { ptr } => Op::MarkPinned { addr: args[ptr] },
        Semantics::Copy {
            dst,
            src,
            bytes,
            direction,
        } => Op::Copy {
            dst: args[dst],
            src: args[src],
            bytes: bytes_of(args, bytes),
            direction: match direction {
                DirectionFrom::Fixed(direction) => direction,
                DirectionFrom::KindArg(index) => CopyDirection::from_memcpy_kind(args[index]),
                DirectionFrom::Pointers => CopyDirection::Unresolved,
            },
        },
    }
}

/// Where the call was made, as the kernel resolved it.
fn site_of(event: &Event) -> Option<RawSite> {
    match event.site.status {
        SITE_BUILD_ID => Some(RawSite::BuildId {
            build_id: event.site.build_id,
            offset: event.site.offset,
        }),
        SITE_IP => Some(RawSite::Address(event.site.offset)),
        _ => None,
    }
}

/// The call's result as an error code (0: success).
fn result_of(probe: &crate::registry::CallProbe, event: &Event) -> i32 {
    let args = &event.args;
    // cudaError_t and CUresult are C ints: the upper half of the register is not theirs.
    match probe.semantics {
        // A function returning its pointer fails by returning null.
        Semantics::Alloc {
            ptr: PtrFrom::Ret, ..
        } => i32::from(event.ret == 0),
        // realloc fails by returning null for a size it was asked for.
        Semantics::Realloc { size, .. } => i32::from(event.ret == 0 && args[size] != 0),
        // hotpin_pinned and libc's free return nothing: the register holds garbage.
        Semantics::MarkPinned { .. } => 0,
        Semantics::Free { .. } if probe.library == Library::Libc => 0,
        _ => event.ret as u32 as i32,
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::EventHeader;

    use super::*;

    fn event(kind: EventKind, args: &[u64], ret: u64) -> Event {
        let mut event = Event {
            header: EventHeader {
                kind: kind as u16,
                pid: 7,
                tid: 8,
                ts_ns: 100,
                ..Default::default()
            },
            ret,
            ..Default::default()
        };
        event.args[..args.len()].copy_from_slice(args);
        event
    }

    #[test]
    fn memcpy_reads_direction_from_its_kind_argument() {
        let call = decode_event(&event(EventKind::CudaMemcpy, &[0xd000, 0x4000, 4096, 1], 0))
            .expect("decodes");
        assert_eq!(
            call.op,
            Op::Copy {
                dst: 0xd000,
                src: 0x4000,
                bytes: 4096,
                direction: CopyDirection::HostToDevice
            }
        );
        assert_eq!((call.pid, call.tid, call.result), (7, 8, 0));
    }

    #[test]
    fn memcpy_2d_moves_width_times_height_with_kind_from_the_stack() {
        let args = [0xd000, 512, 0x4000, 256, 200, 10, 2];
        let call = decode_event(&event(EventKind::CudaMemcpy2D, &args, 0)).expect("decodes");
        assert_eq!(
            call.op,
            Op::Copy {
                dst: 0xd000,
                src: 0x4000,
                bytes: 2000,
                direction: CopyDirection::DeviceToHost
            }
        );
    }

    #[test]
    fn async_copies_carry_their_stream_and_others_none() {
        let stream =
            |kind, args: &[u64]| decode_event(&event(kind, args, 0)).expect("decodes").stream;
        assert_eq!(
            stream(EventKind::CuMemcpyHtoDAsync, &[0xd000, 0x4000, 64, 0xab]),
            0xab
        );
        assert_eq!(
            stream(EventKind::CudaMemcpyAsync, &[0xd000, 0x4000, 64, 1, 0xcd]),
            0xcd
        );
        let args_2d = [0xd000, 512, 0x4000, 256, 200, 10, 1, 0xef];
        assert_eq!(stream(EventKind::CudaMemcpy2DAsync, &args_2d), 0xef);
        assert_eq!(
            stream(EventKind::CuMemcpyHtoD, &[0xd000, 0x4000, 64, 0xab]),
            0
        );
    }

    #[test]
    fn a_described_copy_takes_each_side_by_its_memory_type() {
        use crate::registry::described::*;
        let mut args = [0u64; 8];
        // Host source, device destination: to the GPU, width * height * depth bytes.
        args[MEMORY_TYPES] = 1 | (2 << 32);
        (args[SRC_HOST], args[SRC_DEVICE]) = (0x4000, 0x9999);
        (args[DST_HOST], args[DST_DEVICE]) = (0x8888, 0xd000);
        (args[WIDTH], args[HEIGHT], args[DEPTH]) = (16, 4, 3);
        let call = decode_event(&event(EventKind::CuMemcpy3D, &args, 0)).expect("decodes");
        assert_eq!(
            call.op,
            Op::Copy {
                dst: 0xd000,
                src: 0x4000,
                bytes: 16 * 4 * 3,
                direction: CopyDirection::HostToDevice,
            }
        );
        // A unified source: placed later, by its address (the device field holds it).
        args[MEMORY_TYPES] = 4 | (2 << 32);
        let call = decode_event(&event(EventKind::CuMemcpy2D, &args, 0)).expect("decodes");
        assert_eq!(
            call.op,
            Op::Copy {
                dst: 0xd000,
                src: 0x9999,
                bytes: 16 * 4,
                direction: CopyDirection::Unresolved,
            }
        );
    }

    #[test]
    fn alloc_takes_the_pointer_from_the_out_parameter() {
        let mut raw = event(EventKind::CudaMallocHost, &[0x7ff0, 1 << 20], 0);
        raw.out = 0x7f00_0000_0000;
        let call = decode_event(&raw).expect("decodes");
        assert_eq!(
            call.op,
            Op::Alloc {
                addr: 0x7f00_0000_0000,
                size: 1 << 20,
                space: AllocSpace::PinnedHost
            }
        );
        raw.header.flags = FLAG_OUT_UNREADABLE;
        let call = decode_event(&raw).expect("decodes");
        assert!(matches!(call.op, Op::Alloc { addr: 0, .. }));
    }

    #[test]
    fn result_is_the_low_32_bits_as_a_signed_int() {
        let call = decode_event(&event(EventKind::CudaFree, &[0x10], 0xdead_beef_0000_0002))
            .expect("decodes");
        assert_eq!(call.result, 2);
    }

    #[test]
    fn kernel_resolved_call_sites_are_kept() {
        let mut raw = event(EventKind::CudaMallocHost, &[0x10, 64], 0);
        raw.site.status = SITE_BUILD_ID;
        raw.site.build_id = [7; 20];
        raw.site.offset = 0x1234;
        let call = decode_event(&raw).expect("decodes");
        assert_eq!(
            call.site,
            Some(RawSite::BuildId {
                build_id: [7; 20],
                offset: 0x1234
            })
        );
        raw.site.status = SITE_IP;
        assert_eq!(
            decode_event(&raw).expect("decodes").site,
            Some(RawSite::Address(0x1234))
        );
    }

    #[test]
    fn unknown_kinds_and_short_records_are_errors() {
        let mut raw = event(EventKind::CudaFree, &[], 0);
        raw.header.kind = 4242;
        assert_eq!(decode_event(&raw), Err(DecodeError::UnknownKind(4242)));
        assert_eq!(decode(&[0u8; 12]), Err(DecodeError::Truncated { len: 12 }));
        raw.header.kind = EventKind::LibraryOpen as u16;
        assert_eq!(
            decode_event(&raw),
            Err(DecodeError::UnknownKind(300)),
            "not a CUDA call"
        );
    }

    #[test]
    fn driver_page_events_decode_to_page_counts() {
        let mut raw = event(EventKind::DriverLockPages, &[0x7000, 16], 0);
        assert_eq!(
            decode_raw(&raw),
            Ok(TraceEvent::DriverPages {
                pid: 7,
                locked: true,
                pages: 16
            })
        );
        raw.header.kind = EventKind::DriverUnlockPages as u16;
        raw.args = [16, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            decode_raw(&raw),
            Ok(TraceEvent::DriverPages {
                pid: 7,
                locked: false,
                pages: 16
            })
        );
    }

    /// Decodes an event through its bytes, as the recorder does.
    fn decode_raw(event: &Event) -> Result<TraceEvent, DecodeError> {
        // SAFETY: Event is plain old data of EVENT_SIZE bytes.
        let bytes: [u8; tracer_common::EVENT_SIZE] = unsafe { std::mem::transmute(*event) };
        decode(&bytes)
    }

    #[test]
    fn nested_and_partial_flags_are_kept() {
        let mut raw = event(EventKind::CuMemcpyHtoD, &[1, 2, 3], 0);
        raw.header.flags = FLAG_NESTED | FLAG_NO_ENTRY;
        let call = decode_event(&raw).expect("decodes");
        assert!(call.nested && call.partial);
    }

    #[test]
    fn a_code_record_is_told_apart_from_events_and_checked_for_length() {
        use tracer_common::python::{CODE_TABLE_BYTES, PythonCode};
        let mut record = vec![0u8; size_of::<PythonCode>() + 8];
        record[..2].copy_from_slice(&(EventKind::PythonCode as u16).to_le_bytes());
        let at = std::mem::offset_of!(PythonCode, code);
        record[at..at + 8].copy_from_slice(&0x7f00_1234u64.to_le_bytes());
        let code = python_code(&record)
            .expect("a code record")
            .expect("long enough");
        assert_eq!(code.code, 0x7f00_1234);
        assert_eq!(code.table.len(), CODE_TABLE_BYTES);
        assert_eq!(
            python_code(&record[..200]).map(|r| r.map(|c| c.code)),
            Some(Err(DecodeError::Truncated { len: 200 }))
        );
        // Sent as long as its table: the head and `table_len` bytes; a table_len past the
        // record's end is a truncated record.
        let head = tracer_common::python::CODE_HEAD_BYTES;
        let at = std::mem::offset_of!(PythonCode, table_len);
        record[at..at + 4].copy_from_slice(&3u32.to_le_bytes());
        record[head..head + 3].copy_from_slice(b"\x80\x81\x82");
        let short = python_code(&record[..head + 3])
            .expect("a code record")
            .expect("whole");
        assert_eq!(&short.table[..4], b"\x80\x81\x82\0");
        assert_eq!(
            python_code(&record[..head + 2]).map(|r| r.map(|c| c.code)),
            Some(Err(DecodeError::Truncated { len: head + 2 }))
        );
        // An event is not one, and a record too short to have a kind is neither.
        let event = event(EventKind::PythonFrames, &[1], 0);
        // SAFETY: Event is plain old data of EVENT_SIZE bytes.
        let bytes: [u8; tracer_common::EVENT_SIZE] = unsafe { std::mem::transmute(event) };
        assert!(python_code(&bytes).is_none());
        assert!(python_code(&[1]).is_none());
    }
}
