//! What host memory a copy touches, read from its arguments: pitched (2D) copies, 3D copies
//! by their parameter structures (runtime and driver), and batches. Over-estimating is safe (a
//! copy waited for that need not have been); under-estimating is not.

use std::ffi::c_int;

/// Host memory a copy may read or write: (address, length, whether the copy reads it: a
/// source, copied to the device). Over-estimating is safe (a copy waited for that need not
/// have been); under-estimating is not.
pub type Range = (usize, usize, bool);
/// The host side a copy reads (its source), and the one it writes.
pub(crate) const READ: bool = true;
pub(crate) const WRITE: bool = false;

/// `cudaMemcpyKind` (driver_types.h): the values that name a side device memory.
const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;
const DEVICE_TO_DEVICE: c_int = 3;

/// A runtime copy's source `range`, unless its `kind` names the source device memory: then
/// none (at 0; its length kept, as a copy made in pieces takes its length from its first
/// range). CUDA's reference makes pointers that do not match the kind undefined behaviour
/// ("Calling cudaMemcpyAsync() with dst and src pointers that do not match the direction of
/// the copy results in an undefined behavior"), so a program that names a side device memory
/// promises it is: no block of hotpin's to look up there (#40 item 1, the copy path).
/// `cudaMemcpyHostToHost`, `cudaMemcpyDefault` and any other value keep it.
pub(crate) fn source(kind: c_int, range: Range) -> Range {
    match kind {
        DEVICE_TO_HOST | DEVICE_TO_DEVICE => (0, range.1, range.2),
        _ => range,
    }
}

/// A runtime copy's destination `range`, unless its `kind` names it device memory (as
/// [`source`]).
pub(crate) fn destination(kind: c_int, range: Range) -> Range {
    match kind {
        HOST_TO_DEVICE | DEVICE_TO_DEVICE => (0, range.1, range.2),
        _ => range,
    }
}

/// A device address, as the driver takes it.
pub type Dev = u64;

/// `height` rows of `width` bytes, `pitch` apart, from `start`.
pub(crate) fn pitched(
    start: usize,
    pitch: usize,
    width: usize,
    height: usize,
    side: bool,
) -> Range {
    let rows = pitch.saturating_mul(height.saturating_sub(1));
    (start, rows.saturating_add(width), side)
}

/// The host memory of a batch: each copy's source and destination (either may be host
/// memory: batches take unified addresses).
///
/// # Safety
/// The arrays hold `count` elements each, as CUDA requires.
pub(crate) unsafe fn batch(
    dsts: *const Dev,
    srcs: *const Dev,
    sizes: *const usize,
    count: usize,
) -> Vec<Range> {
    if dsts.is_null() || srcs.is_null() || sizes.is_null() {
        return Vec::new();
    }
    (0..count)
        .flat_map(|i| {
            // SAFETY: within the arrays, as the caller promises.
            let (dst, src, size) = unsafe { (*dsts.add(i), *srcs.add(i), *sizes.add(i)) };
            [(dst as usize, size, WRITE), (src as usize, size, READ)]
        })
        .collect()
}

/// `CUmemorytype`: the side of a described copy that is host memory, or unified (may be).
const MEMORY_HOST: u32 = 1;
const MEMORY_UNIFIED: u32 = 4;

/// cuda.h's `CUDA_MEMCPY2D`.
#[repr(C)]
pub struct Memcpy2D {
    src_x: usize,
    src_y: usize,
    src_type: u32,
    src_host: usize,
    src_device: Dev,
    src_array: usize,
    src_pitch: usize,
    dst_x: usize,
    dst_y: usize,
    dst_type: u32,
    dst_host: usize,
    dst_device: Dev,
    dst_array: usize,
    dst_pitch: usize,
    width: usize,
    height: usize,
}

const _: () = assert!(std::mem::offset_of!(Memcpy2D, dst_type) == 72);
const _: () = assert!(size_of::<Memcpy2D>() == 128);

/// A described side's host address: its host pointer, or its unified address.
fn host_side(kind: u32, host: usize, device: Dev) -> usize {
    match kind {
        MEMORY_HOST => host,
        MEMORY_UNIFIED => device as usize,
        _ => 0,
    }
}

impl Memcpy2D {
    /// # Safety
    /// `c` is null or points to a descriptor, as CUDA requires.
    pub(crate) unsafe fn ranges(c: *const Self) -> [Range; 2] {
        // SAFETY: as the caller promises.
        let Some(c) = (unsafe { c.as_ref() }) else {
            return [(0, 0, READ); 2];
        };
        let size = [c.width, c.height, 1];
        [
            described(
                host_side(c.src_type, c.src_host, c.src_device),
                [c.src_x, c.src_y, 0],
                c.src_pitch,
                c.height,
                size,
                READ,
            ),
            described(
                host_side(c.dst_type, c.dst_host, c.dst_device),
                [c.dst_x, c.dst_y, 0],
                c.dst_pitch,
                c.height,
                size,
                WRITE,
            ),
        ]
    }
}

/// The host memory one side of a described copy spans: from its first byte (`base` offset by
/// `pos`, x in bytes) to the end of its last row, `pitch` bytes a row and `slice_height` rows a
/// slice. The rows' gaps are in it. Nothing where the side is not host memory (`base` 0).
fn described(
    base: usize,
    pos: [usize; 3],
    pitch: usize,
    slice_height: usize,
    size: [usize; 3],
    side: bool,
) -> Range {
    if base == 0 {
        return (0, 0, side);
    }
    let [x, y, z] = pos;
    let [width, height, depth] = size;
    let row = |slice: usize, slice_height: usize, row: usize| {
        slice
            .saturating_mul(slice_height)
            .saturating_add(row)
            .saturating_mul(pitch)
    };
    let first = row(z, slice_height, y).saturating_add(x);
    // Slices shorter than the copy's height (0 is allowed with one slice) would end the span
    // too soon: the end is reckoned with slices at least that high, the safe side.
    let last_row = row(
        depth.saturating_sub(1),
        slice_height.max(height),
        height.saturating_sub(1),
    );
    (
        base.saturating_add(first),
        last_row.saturating_add(width),
        side,
    )
}

/// cuda.h's `CUDA_MEMCPY3D`.
#[repr(C)]
pub struct Memcpy3D {
    src_x: usize,
    src_y: usize,
    src_z: usize,
    src_lod: usize,
    src_type: u32,
    src_host: usize,
    src_device: Dev,
    src_array: usize,
    reserved0: usize,
    src_pitch: usize,
    src_height: usize,
    dst_x: usize,
    dst_y: usize,
    dst_z: usize,
    dst_lod: usize,
    dst_type: u32,
    dst_host: usize,
    dst_device: Dev,
    dst_array: usize,
    reserved1: usize,
    dst_pitch: usize,
    dst_height: usize,
    width: usize,
    height: usize,
    depth: usize,
}

const _: () = assert!(std::mem::offset_of!(Memcpy3D, dst_type) == 120);
const _: () = assert!(std::mem::offset_of!(Memcpy3D, depth) == 192);

impl Memcpy3D {
    /// # Safety
    /// `c` is null or points to a descriptor, as CUDA requires.
    pub(crate) unsafe fn ranges(c: *const Self) -> [Range; 2] {
        // SAFETY: as the caller promises.
        let Some(c) = (unsafe { c.as_ref() }) else {
            return [(0, 0, READ); 2];
        };
        let size = [c.width, c.height, c.depth];
        [
            described(
                host_side(c.src_type, c.src_host, c.src_device),
                [c.src_x, c.src_y, c.src_z],
                c.src_pitch,
                c.src_height,
                size,
                READ,
            ),
            described(
                host_side(c.dst_type, c.dst_host, c.dst_device),
                [c.dst_x, c.dst_y, c.dst_z],
                c.dst_pitch,
                c.dst_height,
                size,
                WRITE,
            ),
        ]
    }
}

/// driver_types.h's `cudaMemcpy3DParms`.
#[repr(C)]
pub struct Memcpy3DParms {
    src_array: usize,
    src_pos: [usize; 3],
    src_ptr: PitchedPtr,
    dst_array: usize,
    dst_pos: [usize; 3],
    dst_ptr: PitchedPtr,
    extent: [usize; 3],
    kind: c_int,
}

/// `cudaPitchedPtr`.
#[repr(C)]
struct PitchedPtr {
    ptr: usize,
    pitch: usize,
    xsize: usize,
    ysize: usize,
}

const _: () = assert!(std::mem::offset_of!(Memcpy3DParms, dst_ptr) == 96);
const _: () = assert!(std::mem::offset_of!(Memcpy3DParms, kind) == 152);

impl Memcpy3DParms {
    /// Every side given by pointer may be host memory (with `cudaMemcpyDefault` the kind
    /// does not say): both are looked up.
    ///
    /// # Safety
    /// `p` is null or points to parameters, as CUDA requires.
    pub(crate) unsafe fn ranges(p: *const Self) -> [Range; 2] {
        // SAFETY: as the caller promises.
        let Some(p) = (unsafe { p.as_ref() }) else {
            return [(0, 0, READ); 2];
        };
        // With an array on either side, the extent's width counts the array's elements (up to
        // 16 bytes each), not bytes: the pointer side's rows are taken to fill their pitch.
        let arrays = p.src_array != 0 || p.dst_array != 0;
        let side = |ptr: &PitchedPtr, pos: [usize; 3], reads: bool| {
            let mut size = p.extent;
            if arrays {
                size[0] = ptr.pitch.saturating_sub(pos[0]).max(size[0]);
            }
            described(ptr.ptr, pos, ptr.pitch, ptr.ysize, size, reads)
        };
        [
            side(&p.src_ptr, p.src_pos, READ),
            side(&p.dst_ptr, p.dst_pos, WRITE),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_the_kind_names_device_memory_is_none_and_keeps_its_length() {
        let (dst, src) = (
            (0x7f00_0000_0000, 4096, WRITE),
            (0x5555_0000_0000, 4096, READ),
        );
        let none = |range: Range| (0, range.1, range.2);
        // cudaMemcpyHostToHost, HostToDevice, DeviceToHost, DeviceToDevice, Default, and a
        // value CUDA refuses.
        for (kind, want) in [
            (0, [dst, src]),
            (1, [none(dst), src]),
            (2, [dst, none(src)]),
            (3, [none(dst), none(src)]),
            (4, [dst, src]),
            (7, [dst, src]),
        ] {
            assert_eq!(
                [destination(kind, dst), source(kind, src)],
                want,
                "kind {kind}"
            );
        }
    }

    #[test]
    fn a_described_side_spans_its_first_byte_to_the_end_of_its_last_row() {
        const MIB: usize = 1 << 20;
        // The whole of a 4 MiB buffer, 4 rows of 1 MiB: exactly the buffer.
        assert_eq!(
            described(0x1000, [0, 0, 0], MIB, 4, [MIB, 4, 1], READ),
            (0x1000, 4 * MIB, READ)
        );
        // Rows 1-2, from byte 16 of each, 64 bytes a row, pitch 256.
        assert_eq!(
            described(0x1000, [16, 1, 0], 256, 4, [64, 2, 1], WRITE),
            (0x1000 + 256 + 16, 256 + 64, WRITE)
        );
        // 3D: slices 2-3 of 8 rows of pitch 100, rows 1-2 of each, bytes 10-19 of each row.
        assert_eq!(
            described(1000, [10, 1, 2], 100, 8, [10, 2, 2], READ),
            (1000 + (2 * 8 + 1) * 100 + 10, (8 + 1) * 100 + 10, READ)
        );
        // One slice whose height is given as 0 (allowed for one slice): from its first byte.
        assert_eq!(
            described(1000, [10, 2, 0], 100, 0, [10, 3, 1], READ),
            (1000 + 2 * 100 + 10, 2 * 100 + 10, READ)
        );
        // A side that is not host memory spans nothing; an empty copy, no row.
        assert_eq!(
            described(0, [5, 5, 5], 100, 8, [10, 2, 2], READ),
            (0, 0, READ)
        );
        assert_eq!(
            described(1000, [0, 0, 0], 100, 8, [10, 0, 1], READ),
            (1000, 10, READ)
        );
    }

    #[test]
    fn a_3d_copy_to_an_array_spans_whole_pitched_rows_of_its_host_side() {
        let host = 0x10_0000usize;
        let p = Memcpy3DParms {
            src_array: 0,
            src_pos: [64, 1, 0],
            src_ptr: PitchedPtr {
                ptr: host,
                pitch: 1024,
                xsize: 256,
                ysize: 4,
            },
            dst_array: 0xdead,
            dst_pos: [0; 3],
            dst_ptr: PitchedPtr {
                ptr: 0,
                pitch: 0,
                xsize: 0,
                ysize: 0,
            },
            // 100 float4 elements a row (1600 bytes would not fit the pitch; 100 bytes would
            // under-count): the row is taken to its pitch's end.
            extent: [100, 2, 1],
            kind: 1,
        };
        // SAFETY: parameters on the stack.
        let [read, written] = unsafe { Memcpy3DParms::ranges(&p) };
        assert_eq!(read, (host + 1024 + 64, 1024 + (1024 - 64), READ));
        assert_eq!(written, (0, 0, WRITE));
    }

    #[test]
    fn the_runtime_and_driver_forms_of_one_2d_copy_span_the_same_bytes() {
        let (src, dst) = (0x10_0000usize, 0x20_0000usize);
        let c = Memcpy2D {
            src_x: 8,
            src_y: 3,
            src_type: MEMORY_HOST,
            src_host: src,
            src_device: 0,
            src_array: 0,
            src_pitch: 512,
            dst_x: 0,
            dst_y: 0,
            dst_type: MEMORY_HOST,
            dst_host: dst,
            dst_device: 0,
            dst_array: 0,
            dst_pitch: 256,
            width: 200,
            height: 5,
        };
        // SAFETY: a descriptor on the stack.
        let [read, written] = unsafe { Memcpy2D::ranges(&c) };
        assert_eq!(read, pitched(src + 3 * 512 + 8, 512, 200, 5, READ));
        assert_eq!(written, pitched(dst, 256, 200, 5, WRITE));
    }
}
