//! Who is told the truth about host memory hotpin registered behind the program's back
//! (docs/transparency.md, "Questions about memory"). A question (`cudaPointerGetAttributes`,
//! `cuPointerGetAttribute(s)`, `cudaHostGetFlags`, ...) is told apart by the file its return
//! address lies in:
//!
//! - **CUDA's own libraries** ask before they copy, and copy a registered block as pinned
//!   memory: the truth.
//! - **Frameworks whose only use of the answer is to choose a copy path**: told "pinned",
//!   they copy straight from the memory instead of first copying it, on the CPU, into
//!   pinned staging buffers of their own. The truth, for a block registered whole; such a
//!   block is then *exposed* (never let go while the program holds it). A question of theirs
//!   about memory left pageable announces that copy through their staging buffer, which
//!   hotpin would otherwise never see.
//! - **Everything else** (the program, PyTorch, a static CUDA runtime linked into a library
//!   not listed): the answer CUDA gives for pageable memory. PyTorch's `pin_memory()` returns
//!   the tensor itself when told it is pinned, so the program's copy would alias its original.

/// Who asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    Cuda,
    /// A framework whose questions only choose a copy path ([`Caller::is_framework`]).
    Framework,
    /// Such a framework whose pinned requests are its staging buffers, made before any array
    /// is known hot (CuPy's pinned pool, `cudaHostAllocPortable`): hotpin pins them itself, to
    /// let them go once the arrays they stage are shown pinned. Not XLA: its pinned host
    /// allocator also holds arrays of the `pinned_host` memory kind, which it may use as only
    /// pinned memory can be used.
    FrameworkPool,
    Program,
}

impl Caller {
    /// Whether its questions are a framework's ([`FRAMEWORKS`]).
    pub fn is_framework(self) -> bool {
        matches!(self, Caller::Framework | Caller::FrameworkPool)
    }
}

/// File names (the start of the last path component) of CUDA's libraries: the runtime, the
/// driver, and NVIDIA's user-mode libraries that call the driver through the table
/// `cuGetProcAddress` gave them.
const CUDA: [&[u8]; 3] = [b"libcuda.so", b"libcudart", b"libnvidia-"];

/// Path fragments of the framework modules whose questions only choose a copy path, each
/// read in the framework's source (docs/transparency.md has the table, with what each does
/// with the answer):
/// - CuPy's runtime module, where `cp.asarray` asks (`is_memory_pinned`) whether to copy a
///   NumPy array straight or through its pinned pool. It links CUDA's runtime statically:
///   its `cudaPointerGetAttributes` reaches the driver's `cuPointerGetAttributes` through the
///   table, from inside this module.
/// - JAX's CUDA plugin, where XLA's `IsHostMemoryPinned` (`cuPointerGetAttributes`: type and
///   range) decides whether `device_put` and `np.asarray` of an array stage through a bounce
///   buffer (JAX 0.11 and later ask; older ones never do).
const FRAMEWORKS: [&[u8]; 2] = [
    b"/cupy_backends/cuda/api/runtime.",
    b"/jax_plugins/xla_cuda",
];

/// Of those, the ones whose pinned requests are staging buffers of a pool
/// ([`Caller::FrameworkPool`]): CuPy's runtime module, where `cupy.cuda.pinned_memory`'s pool
/// calls `cudaHostAlloc(..., cudaHostAllocPortable)`.
const POOLS: [&[u8]; 1] = [b"/cupy_backends/cuda/api/runtime."];

/// Who asked, from the path of the file its return address lies in.
pub fn caller(path: &[u8]) -> Caller {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    if CUDA.iter().any(|prefix| name.starts_with(prefix)) {
        Caller::Cuda
    } else if let Some(fragment) = FRAMEWORKS
        .iter()
        .find(|fragment| path.windows(fragment.len()).any(|w| w == **fragment))
    {
        if POOLS.contains(fragment) {
            Caller::FrameworkPool
        } else {
            Caller::Framework
        }
    } else {
        Caller::Program
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_are_told_apart_by_their_file() {
        assert_eq!(
            caller(b"/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
            Caller::Cuda
        );
        assert_eq!(caller(b"/opt/venv/lib/libcudart.so.13"), Caller::Cuda);
        assert_eq!(
            caller(
                b"/opt/venv/lib/python3.12/site-packages/cupy_backends/cuda/api/\
                  runtime.cpython-312-x86_64-linux-gnu.so"
            ),
            Caller::FrameworkPool
        );
        assert_eq!(
            caller(
                b"/opt/venv/lib/python3.12/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so"
            ),
            Caller::Framework
        );
        // PyTorch, a program, and a file merely named like CuPy's elsewhere.
        assert_eq!(
            caller(b"/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so"),
            Caller::Program
        );
        assert_eq!(caller(b"/usr/bin/python3.12"), Caller::Program);
        assert_eq!(
            caller(b"/tmp/runtime.cpython-312-x86_64-linux-gnu.so"),
            Caller::Program
        );
    }
}
