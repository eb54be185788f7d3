//! Where memory comes from: pinned blocks (cached for reuse) and pageable ones.

use std::{collections::BTreeMap, ffi::c_void, time::Instant};

use crate::cuda::{CudaError, CudaRuntime};

/// At and above this size a block is pinned in place with cudaHostRegister on page-aligned
/// memory (10-17x cheaper than cudaHostAlloc on our H100); below, cudaMallocHost.
pub const REGISTER_THRESHOLD: usize = 1 << 20;

/// How a pinned block was pinned, and so how it is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinHow {
    /// cudaMallocHost; released with cudaFreeHost.
    HostAlloc,
    /// An anonymous mapping of `mapped` bytes registered with cudaHostRegister; released with
    /// cudaHostUnregister and munmap.
    Registered { mapped: usize },
}

/// A pinned block owned by the pool or lent to a caller.
#[derive(Debug)]
pub struct PinnedBlock {
    pub ptr: *mut u8,
    /// Usable bytes (at least what was asked for).
    pub capacity: usize,
    pub how: PinHow,
}

// SAFETY: a block is plain memory owned by whoever holds the PinnedBlock.
unsafe impl Send for PinnedBlock {}

/// Pinned memory, with freed blocks kept for reuse so pinning stays off the hot path.
///
/// A cached block is reused for a request as `hotpin_policy::reuse` says: at most 10% larger,
/// or within a page for a request smaller than a page.
#[derive(Debug, Default)]
pub struct PinnedPool {
    cache: BTreeMap<usize, Vec<PinnedBlock>>,
    cached_bytes: u64,
}

/// The largest block reuse accepts for a request of `size` (`hotpin_policy::reuse`).
fn reuse_limit(size: usize) -> usize {
    hotpin_policy::reuse::reuse_limit(size, page_size())
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

impl PinnedPool {
    /// A cached block for `size`, if one fits within the reuse limit.
    pub fn take_cached(&mut self, size: usize) -> Option<PinnedBlock> {
        let (&capacity, _) = self.cache.range(size..=reuse_limit(size)).next()?;
        let blocks = self.cache.get_mut(&capacity)?;
        let block = blocks.pop()?;
        if blocks.is_empty() {
            self.cache.remove(&capacity);
        }
        self.cached_bytes -= block.capacity as u64;
        Some(block)
    }

    /// Pins a new block of `size` bytes; returns it and the time pinning took.
    pub fn pin_new(cuda: &CudaRuntime, size: usize) -> Result<(PinnedBlock, u64), CudaError> {
        let start = Instant::now();
        let block = if size >= REGISTER_THRESHOLD {
            let mapped = size.next_multiple_of(page_size());
            // SAFETY: an anonymous private mapping; checked for failure below.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    mapped,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                return Err(CudaError(2));
            }
            // SAFETY: the mapping is ours and stays mapped while registered.
            if let Err(error) = unsafe { cuda.host_register(ptr, mapped) } {
                // SAFETY: unmapping what was just mapped.
                unsafe { libc::munmap(ptr, mapped) };
                return Err(error);
            }
            PinnedBlock {
                ptr: ptr.cast(),
                capacity: size,
                how: PinHow::Registered { mapped },
            }
        } else {
            let ptr = cuda.malloc_host(size)?;
            PinnedBlock {
                ptr: ptr.cast(),
                capacity: size,
                how: PinHow::HostAlloc,
            }
        };
        Ok((block, start.elapsed().as_nanos() as u64))
    }

    /// Keeps a freed block for reuse.
    pub fn give_back(&mut self, block: PinnedBlock) {
        self.cached_bytes += block.capacity as u64;
        self.cache.entry(block.capacity).or_default().push(block);
    }

    pub fn cached_bytes(&self) -> u64 {
        self.cached_bytes
    }

    /// Unpins and frees every cached block (under memory pressure, and at the end).
    pub fn release_cache(&mut self, cuda: &CudaRuntime) {
        for (_, blocks) in std::mem::take(&mut self.cache) {
            for block in blocks {
                release(cuda, block);
            }
        }
        self.cached_bytes = 0;
    }
}

/// Unpins and frees a block.
pub fn release(cuda: &CudaRuntime, block: PinnedBlock) {
    let ptr = block.ptr.cast::<c_void>();
    let result = match block.how {
        // SAFETY: the block came from cudaMallocHost and is no longer lent out.
        PinHow::HostAlloc => unsafe { cuda.free_host(ptr) },
        PinHow::Registered { mapped } => {
            // SAFETY: registered by pin_new and no longer lent out; unmapped after.
            let result = unsafe { cuda.host_unregister(ptr) };
            // SAFETY: the mapping pin_new made.
            unsafe { libc::munmap(ptr, mapped) };
            result
        }
    };
    if let Err(error) = result {
        tracing::warn!(%error, "releasing a pinned block failed; its memory is left as is");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(capacity: usize) -> PinnedBlock {
        PinnedBlock {
            ptr: std::ptr::null_mut(),
            capacity,
            how: PinHow::HostAlloc,
        }
    }

    #[test]
    fn a_cached_block_is_reused_only_within_ten_percent() {
        let mut pool = PinnedPool::default();
        pool.give_back(fake(10 << 20));
        assert!(
            pool.take_cached(8 << 20).is_none(),
            "25% larger is not reused"
        );
        let block = pool
            .take_cached(19 << 19)
            .expect("9.5 MiB reuses a 10 MiB block");
        assert_eq!(block.capacity, 10 << 20);
        assert_eq!(pool.cached_bytes(), 0);
    }

    #[test]
    fn small_requests_reuse_blocks_within_a_page() {
        let mut pool = PinnedPool::default();
        pool.give_back(fake(4096));
        assert_eq!(pool.take_cached(100).map(|b| b.capacity), Some(4096));
    }

    #[test]
    fn the_smallest_fitting_block_is_taken() {
        let mut pool = PinnedPool::default();
        for capacity in [12 << 20, 10 << 20, 11 << 20] {
            pool.give_back(fake(capacity));
        }
        assert_eq!(
            pool.take_cached(10 << 20).map(|b| b.capacity),
            Some(10 << 20)
        );
        assert_eq!(pool.cached_bytes(), 23 << 20);
    }
}
