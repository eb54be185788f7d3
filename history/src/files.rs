//! How hotpin's tools touch the files a user names, as root as often as not.
//!
//! - **Outputs** (histories, checkpoints, the fallback, reports, cost files, the store): a path
//!   that exists must be a regular file. A symbolic link is refused, never followed nor
//!   replaced; so is a device, a FIFO, a socket or a directory (`tracer record -o /dev/null`
//!   must not replace the machine's /dev/null with a file). Whole files are written to a
//!   temporary name created afresh (`O_EXCL`: never through a link someone planted there),
//!   then renamed over the path.
//! - **Inputs** (histories, cost files): read up to a bound of what is actually read, not of
//!   what the file's metadata says (0 for a device or a pipe): `/dev/zero` ends in an error,
//!   not in all the memory there is.

use std::{
    fs,
    io::{self, Read, Write},
    os::unix::fs::{FileTypeExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

/// What kind of thing `metadata` says a path is, in words for an error.
fn kind(file_type: fs::FileType) -> &'static str {
    if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Checks that `path` may be written as a whole file: it does not exist, or it is a regular
/// file (not a link to one). The error says what it is instead.
pub fn check_output(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_file() => Ok(()),
        Ok(metadata) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is {}: hotpin writes only regular files and never replaces anything else",
                path.display(),
                kind(metadata.file_type())
            ),
        )),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// The directory a file at `path` lives in (`.` for a bare name).
pub fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Writes `bytes` to `path` as a whole file with permissions `mode`: to a temporary name in
/// the same directory, created afresh, then renamed over `path` after [`check_output`]. No
/// half-written file ever has the final name.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    check_output(path)?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    // Unique per write, so two writers of one path in one process cannot collide.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = directory_of(path).join(format!(
        ".{}.tmp-{}-{n}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        check_output(path)?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Whether `a` and `b` are one existing file (the same device and inode, links followed):
/// an output that is the input it was made from is refused (#41 item 10).
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Opens `path` for writing in place, truncating a regular file, never through a symbolic
/// link (`O_NOFOLLOW`); a device or a FIFO is written into as it is (`/dev/stdout`), which
/// only the commands that stream text (`tracer export`) use.
pub fn create_streamed(path: &Path, mode: u32) -> io::Result<fs::File> {
    let file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|error| {
            if error.raw_os_error() == Some(libc::ELOOP) {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is a symbolic link: hotpin does not write through links",
                        path.display()
                    ),
                )
            } else {
                error
            }
        })?;
    if file.metadata()?.file_type().is_file() {
        file.set_len(0)?;
    }
    Ok(file)
}

/// Reads all of `path`, at most `limit` bytes: more is an error of kind `FileTooLarge`
/// whatever the file's metadata says (a device, a FIFO or a growing file says nothing
/// true). A FIFO is read like any file: what it gives is what is read.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    read_rest_bounded(fs::File::open(path)?, &mut bytes, limit).map_err(|error| {
        if error.kind() == io::ErrorKind::FileTooLarge {
            io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("{} holds more than {limit} bytes", path.display()),
            )
        } else {
            error
        }
    })?;
    Ok(bytes)
}

/// Reads what is left of `reader` onto `bytes` (what was read of it already), `bytes` to hold
/// at most `limit` in all: more is an error of kind `FileTooLarge`.
pub fn read_rest_bounded(reader: impl Read, bytes: &mut Vec<u8>, limit: u64) -> io::Result<()> {
    let rest = limit.saturating_add(1).saturating_sub(bytes.len() as u64);
    reader.take(rest).read_to_end(bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("more than {limit} bytes"),
        ));
    }
    Ok(())
}

/// Whether `path` is something that can be read only once (a FIFO, a pipe such as
/// `<(cat file)`, a socket or a character device): a reader that must read it twice (checked
/// by one process, used by another) refuses it.
pub fn read_once(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|metadata| {
        let file_type = metadata.file_type();
        file_type.is_fifo() || file_type.is_socket() || file_type.is_char_device()
    })
}

/// `path` made absolute against the current directory (not resolved: links stay links).
pub fn absolute(path: &Path) -> io::Result<PathBuf> {
    std::path::absolute(path)
}

/// This machine's host name (the kernel's), if it has one.
pub fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("hotpin-files-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn a_link_or_a_device_is_refused_and_left_as_it_is() {
        let dir = scratch("refuse");
        let target = dir.join("target");
        fs::write(&target, b"keep").expect("target");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let error = write_atomically(&link, b"new", 0o600).expect_err("a link is refused");
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert!(
            fs::symlink_metadata(&link)
                .expect("link")
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(&target).expect("target"), b"keep");
        let error = write_atomically(Path::new("/dev/null"), b"x", 0o600).expect_err("a device");
        assert!(error.to_string().contains("character device"), "{error}");
        assert!(
            fs::metadata("/dev/null")
                .expect("/dev/null")
                .file_type()
                .is_char_device(),
            "/dev/null is still a device"
        );
        let error = create_streamed(&link, 0o600).expect_err("no writing through a link");
        assert!(error.to_string().contains("symbolic link"), "{error}");
        fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn a_planted_link_at_the_temporary_name_is_not_followed() {
        let dir = scratch("planted");
        let victim = dir.join("victim");
        fs::write(&victim, b"keep").expect("victim");
        let out = dir.join("out.hotpin");
        // Every temporary name this process could use next, planted.
        for n in 0..64 {
            let _ = std::os::unix::fs::symlink(
                &victim,
                dir.join(format!(".out.hotpin.tmp-{}-{n}", std::process::id())),
            );
        }
        // Refused (a planted name was next) or written under a name nobody planted: never
        // through the link.
        if write_atomically(&out, b"history", 0o600).is_ok() {
            assert_eq!(fs::read(&out).expect("out"), b"history");
        }
        assert_eq!(fs::read(&victim).expect("victim"), b"keep");
        fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn reads_are_bounded_by_what_is_read() {
        let error = read_bounded(Path::new("/dev/zero"), 1 << 20).expect_err("endless");
        assert_eq!(error.kind(), io::ErrorKind::FileTooLarge);
        let dir = scratch("bounded");
        let file = dir.join("small");
        fs::write(&file, b"12345").expect("file");
        assert_eq!(read_bounded(&file, 5).expect("fits"), b"12345");
        assert!(read_bounded(&file, 4).is_err());
        assert!(read_once(Path::new("/dev/zero")));
        assert!(!read_once(&file));
        fs::remove_dir_all(&dir).expect("clean up");
    }
}
