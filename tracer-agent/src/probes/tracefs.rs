//! Tracepoint record layouts, read from the kernel that runs us: each tracepoint's `format`
//! file in tracefs names its fields with their byte offsets and sizes. The kernel programs read
//! fields at the offsets found here (the `FIELDS` map), so no kernel's layout is built in.

use std::path::{Path, PathBuf};

use tracer_common::field;

/// Where tracefs is mounted (the agent mounts it there when it is not).
pub const TRACEFS: &str = "/sys/kernel/tracing";
/// Where older systems mount it, under debugfs.
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// Where tracefs is, mounting it at [`TRACEFS`] first if it is nowhere (fresh machines often
/// have it unmounted). A failed mount is logged; the format files then cannot be read, and
/// the tracepoints say so.
pub fn mount() -> PathBuf {
    for root in [TRACEFS, DEBUGFS_TRACING] {
        if Path::new(root).join("events").exists() {
            return PathBuf::from(root);
        }
    }
    // SAFETY: constant NUL-terminated strings; mount has no other preconditions.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            c"/sys/kernel/tracing".as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "cannot mount tracefs");
    }
    PathBuf::from(TRACEFS)
}

/// One field the kernel programs read: which tracepoint's record, which field, its size.
#[derive(Clone, Copy, Debug)]
pub struct FieldSpec {
    /// Index in the `FIELDS` map (`tracer_common::field::*`).
    pub index: u32,
    pub category: &'static str,
    pub event: &'static str,
    pub name: &'static str,
    /// The size the kernel program reads; a record whose field has another size is refused.
    pub size: u32,
}

/// Every field any kernel program reads. The host memory programs read the syscall number and
/// up to six arguments of mmap, munmap, mremap and brk at one base: `sys_enter_*` records lay
/// their arguments out consecutively, 8 bytes each, after `__syscall_nr` (checked on every
/// syscall that uses it, by [`check_syscall_layout`]).
pub const FIELDS: &[FieldSpec] = &[
    spec(
        field::SYSCALL_NR,
        "syscalls",
        "sys_enter_mmap",
        "__syscall_nr",
        4,
    ),
    spec(field::SYSCALL_ARGS, "syscalls", "sys_enter_mmap", "addr", 8),
    spec(field::SYSCALL_RET, "syscalls", "sys_exit_mmap", "ret", 8),
    spec(
        field::SYSCALL_EXIT_NR,
        "syscalls",
        "sys_exit_mmap",
        "__syscall_nr",
        4,
    ),
    spec(
        field::OPENAT_FILENAME,
        "syscalls",
        "sys_enter_openat",
        "filename",
        8,
    ),
    spec(
        field::FAULT_ADDRESS,
        "exceptions",
        "page_fault_user",
        "address",
        8,
    ),
    spec(field::IOCTL_FD, "syscalls", "sys_enter_ioctl", "fd", 8),
    spec(field::IOCTL_CMD, "syscalls", "sys_enter_ioctl", "cmd", 8),
    spec(field::NEWTASK_PID, "task", "task_newtask", "pid", 4),
    spec(
        field::NEWTASK_CLONE_FLAGS,
        "task",
        "task_newtask",
        "clone_flags",
        8,
    ),
];

const fn spec(
    index: u32,
    category: &'static str,
    event: &'static str,
    name: &'static str,
    size: u32,
) -> FieldSpec {
    FieldSpec {
        index,
        category,
        event,
        name,
        size,
    }
}

/// A field of a tracepoint record as its format file gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: u32,
    pub size: u32,
}

/// Why a field's offset could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("cannot read {}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: no field {name}", path.display())]
    NoField { path: PathBuf, name: &'static str },
    #[error("{}: field {name} is {found} bytes, the kernel program reads {expected}", path.display())]
    Size {
        path: PathBuf,
        name: &'static str,
        found: u32,
        expected: u32,
    },
}

/// The fields of a format file's text, in order.
pub fn parse_format(text: &str) -> Vec<Field> {
    text.lines().filter_map(parse_field_line).collect()
}

/// `\tfield:const char * filename;\toffset:24;\tsize:8;\tsigned:0;`
fn parse_field_line(line: &str) -> Option<Field> {
    let mut name = None;
    let mut offset = None;
    let mut size = None;
    for part in line.trim().split(';') {
        let part = part.trim();
        if let Some(declaration) = part.strip_prefix("field:") {
            // The last word, without an array suffix: `char comm[16]` is `comm`.
            let last = declaration.split_whitespace().last()?;
            let last = last.split('[').next()?.trim_start_matches('*');
            name = Some(last.to_string());
        } else if let Some(value) = part.strip_prefix("offset:") {
            offset = value.parse().ok();
        } else if let Some(value) = part.strip_prefix("size:") {
            size = value.parse().ok();
        }
    }
    Some(Field {
        name: name?,
        offset: offset?,
        size: size?,
    })
}

/// The format file of a tracepoint under tracefs mounted at `root`.
pub fn format_path(root: &Path, category: &str, event: &str) -> PathBuf {
    root.join("events")
        .join(category)
        .join(event)
        .join("format")
}

/// Reads a tracepoint's fields.
pub fn read_fields(root: &Path, category: &str, event: &str) -> Result<Vec<Field>, FormatError> {
    let path = format_path(root, category, event);
    std::fs::read_to_string(&path)
        .map(|text| parse_format(&text))
        .map_err(|source| FormatError::Unreadable { path, source })
}

/// The offset of one field the kernel programs read, checked against the size they read.
pub fn offset_of(root: &Path, spec: &FieldSpec) -> Result<u32, FormatError> {
    let path = format_path(root, spec.category, spec.event);
    let fields = read_fields(root, spec.category, spec.event)?;
    let field =
        fields
            .iter()
            .find(|f| f.name == spec.name)
            .ok_or_else(|| FormatError::NoField {
                path: path.clone(),
                name: spec.name,
            })?;
    if field.size != spec.size {
        return Err(FormatError::Size {
            path,
            name: spec.name,
            found: field.size,
            expected: spec.size,
        });
    }
    Ok(field.offset)
}

/// Whether a `sys_enter_*` record has its arguments where the host memory programs read them:
/// consecutive 8-byte fields from `args_base`.
pub fn check_syscall_layout(root: &Path, event: &str, args_base: u32) -> Result<(), String> {
    let fields = read_fields(root, "syscalls", event).map_err(|e| crate::error::chain(&e))?;
    let arguments = fields
        .iter()
        .skip_while(|f| f.name != "__syscall_nr")
        .skip(1);
    for (i, field) in arguments.enumerate() {
        let expected = args_base + 8 * i as u32;
        if field.offset != expected || field.size != 8 {
            return Err(format!(
                "syscalls:{event}: argument {} is at {} ({} bytes), not at {expected} (8 bytes)",
                field.name, field.offset, field.size
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENAT: &str = "name: sys_enter_openat
ID: 647
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;
\tfield:int dfd;\toffset:16;\tsize:8;\tsigned:0;
\tfield:const char * filename;\toffset:24;\tsize:8;\tsigned:0;
\tfield:int flags;\toffset:32;\tsize:8;\tsigned:0;
\tfield:umode_t mode;\toffset:40;\tsize:8;\tsigned:0;

print fmt: \"dfd: 0x%08lx, filename: 0x%08lx\", ((unsigned long)(REC->dfd)), ((unsigned long)(REC->filename))
";

    #[test]
    fn a_format_file_gives_every_field_with_offset_and_size() {
        let fields = parse_format(OPENAT);
        let names: Vec<_> = fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "common_type",
                "common_flags",
                "common_preempt_count",
                "common_pid",
                "__syscall_nr",
                "dfd",
                "filename",
                "flags",
                "mode"
            ]
        );
        let filename = &fields[6];
        assert_eq!((filename.offset, filename.size), (24, 8), "pointer field");
    }

    #[test]
    fn array_and_pointer_declarations_are_named_by_their_last_word() {
        let line = "\tfield:char comm[16];\toffset:12;\tsize:16;\tsigned:0;";
        let field = parse_field_line(line).expect("a field");
        assert_eq!(field.name, "comm");
        let line = "\tfield:const char *filename;\toffset:24;\tsize:8;\tsigned:0;";
        assert_eq!(parse_field_line(line).expect("a field").name, "filename");
        assert!(parse_field_line("print fmt: \"x\"").is_none());
    }

    #[test]
    fn every_field_the_programs_read_is_found_on_the_running_kernel() {
        // Format files need tracefs, which the agent mounts as root; in CI the tests run as
        // root, so a missing tracefs is a failure here, not a skip.
        let root = &mount();
        for spec in FIELDS {
            // page_fault_user exists on x86 only; everything else on every kernel we support.
            let offset = offset_of(root, spec)
                .unwrap_or_else(|e| panic!("{}:{} {}: {e}", spec.category, spec.event, spec.name));
            assert!(offset >= 8, "{spec:?} lies in the common header: {offset}");
        }
        let base = offset_of(root, &FIELDS[1]).expect("mmap's first argument");
        for event in [
            "sys_enter_mmap",
            "sys_enter_munmap",
            "sys_enter_mremap",
            "sys_enter_brk",
        ] {
            check_syscall_layout(root, event, base).expect("consecutive 8-byte arguments");
        }
    }
}
