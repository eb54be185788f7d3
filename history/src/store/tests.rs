use std::{
    ffi::{OsStr, OsString},
    fs,
    os::unix::fs::{PermissionsExt as _, symlink},
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

use super::{
    elf::{self, FileHeader},
    program::find_executable_on,
    *,
};
use crate::history::{AllocKind, MemHistory};
use hotpin_registry::registry::CopyDirection;

/// A folder of its own under the system's temporary folder, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static MADE: AtomicU32 = AtomicU32::new(0);
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("hotpin-store-{name}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create a temporary folder");
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The build id of the fixtures made by [`elf_file`].
const BUILD_ID: [u8; 20] = [
    0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10,
    0x00, 0x11, 0x22, 0x33,
];
/// Its key part.
const BUILD_ID_HEX: &str = "0123456789ab";

/// Appends a note (`namesz`, `descsz`, `type`, name and description, each padded to 4).
fn push_note(out: &mut Vec<u8>, name: &[u8], note_type: u32, desc: &[u8]) {
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(&(desc.len() as u32).to_le_bytes());
    out.extend_from_slice(&note_type.to_le_bytes());
    for part in [name, desc] {
        out.extend_from_slice(part);
        out.resize(out.len().next_multiple_of(4), 0);
    }
}

/// A minimal 64-bit little-endian ELF file whose notes hold a GNU property note, then
/// `build_id`: described by a `PT_NOTE` program header when `segment`, and by an `SHT_NOTE`
/// section header when `section`.
fn elf_file(build_id: &[u8], segment: bool, section: bool) -> Vec<u8> {
    const PROGRAM_HEADERS_AT: usize = 64;
    const NOTES_AT: usize = PROGRAM_HEADERS_AT + 56;
    let mut notes = Vec::new();
    push_note(&mut notes, b"GNU\0", 5, &[0; 16]);
    push_note(&mut notes, b"GNU\0", 3, build_id);
    let sections_at = (NOTES_AT + notes.len()).next_multiple_of(8);

    let mut file = vec![0u8; 64];
    file[..4].copy_from_slice(b"\x7fELF");
    file[4] = 2; // ELFCLASS64
    file[5] = 1; // ELFDATA2LSB
    file[6] = 1; // EV_CURRENT
    let put = |file: &mut Vec<u8>, at: usize, bytes: &[u8]| {
        file[at..at + bytes.len()].copy_from_slice(bytes);
    };
    put(&mut file, 0x10, &2u16.to_le_bytes()); // ET_EXEC
    put(&mut file, 0x12, &0x3eu16.to_le_bytes()); // x86-64
    put(&mut file, 0x14, &1u32.to_le_bytes());
    put(&mut file, 0x20, &(PROGRAM_HEADERS_AT as u64).to_le_bytes());
    put(&mut file, 0x28, &(sections_at as u64).to_le_bytes());
    put(&mut file, 0x34, &64u16.to_le_bytes());
    put(&mut file, 0x36, &56u16.to_le_bytes());
    put(&mut file, 0x38, &u16::from(segment).to_le_bytes());
    put(&mut file, 0x3a, &64u16.to_le_bytes());
    put(
        &mut file,
        0x3c,
        &(if section { 2u16 } else { 0 }).to_le_bytes(),
    );

    let mut program_header = vec![0u8; 56];
    put(&mut program_header, 0, &4u32.to_le_bytes()); // PT_NOTE
    put(&mut program_header, 0x08, &(NOTES_AT as u64).to_le_bytes());
    put(
        &mut program_header,
        0x20,
        &(notes.len() as u64).to_le_bytes(),
    );
    put(
        &mut program_header,
        0x28,
        &(notes.len() as u64).to_le_bytes(),
    );
    put(&mut program_header, 0x30, &4u64.to_le_bytes());
    file.extend_from_slice(&program_header);
    file.extend_from_slice(&notes);
    file.resize(sections_at, 0);
    if section {
        let mut section_headers = vec![0u8; 128];
        put(&mut section_headers, 64 + 0x04, &7u32.to_le_bytes()); // SHT_NOTE
        put(
            &mut section_headers,
            64 + 0x18,
            &(NOTES_AT as u64).to_le_bytes(),
        );
        put(
            &mut section_headers,
            64 + 0x20,
            &(notes.len() as u64).to_le_bytes(),
        );
        put(&mut section_headers, 64 + 0x30, &4u64.to_le_bytes());
        file.extend_from_slice(&section_headers);
    }
    file
}

/// Writes `bytes` to `path`, executable.
fn write_executable(path: &Path, bytes: &[u8]) {
    fs::write(path, bytes).expect("write the fixture");
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("make it executable");
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| (*arg).to_owned()).collect()
}

fn key(text: &str) -> ProgramKey {
    ProgramKey::try_from(text.to_owned()).expect("a valid key")
}

/// A small history with one allocation copied once.
fn history() -> MemHistory {
    let mut history = MemHistory::new();
    history.meta_mut().command = vec!["train.py".into()];
    history.alloc(7, 0x1000, 1 << 20, AllocKind::Pageable, None, 1);
    history.transfer(7, 0xd000_0000, 0x1000, 4096, CopyDirection::HostToDevice, 2);
    history
}

// The ELF reader.

#[test]
fn a_build_id_is_read_from_the_note_segment() {
    let file = elf_file(&BUILD_ID, true, false);
    assert_eq!(
        elf::build_id(file.as_slice()).expect("no I/O on a slice"),
        Some(BUILD_ID.to_vec()),
        "the build id note follows a property note in the PT_NOTE segment"
    );
}

#[test]
fn without_a_note_segment_the_note_sections_are_read() {
    let file = elf_file(&BUILD_ID, false, true);
    assert_eq!(
        elf::build_id(file.as_slice()).expect("no I/O on a slice"),
        Some(BUILD_ID.to_vec())
    );
    let neither = elf_file(&BUILD_ID, false, false);
    assert_eq!(elf::build_id(neither.as_slice()).expect("no I/O"), None);
}

#[test]
fn the_test_binary_has_the_same_build_id_by_its_segments_and_its_sections() {
    let exe = fs::File::open("/proc/self/exe").expect("open /proc/self/exe");
    let header = FileHeader::read(&exe)
        .expect("read the ELF header")
        .expect("the test binary is a 64-bit little-endian ELF file");
    let by_segments = elf::build_id_from_segments(&exe, &header).expect("read");
    let by_sections = elf::build_id_from_sections(&exe, &header).expect("read");
    let id = by_segments.expect("Rust test binaries are linked with a build id (cc's default)");
    assert_eq!(Some(&id), by_sections.as_ref(), "one build id, two ways");
    assert_eq!(
        read_elf_build_id(Path::new("/proc/self/exe")).expect("read"),
        Some(id.clone())
    );
    // binutils, where it is installed, agrees.
    let exe_path = std::env::current_exe().expect("the test binary");
    if let Ok(output) = Command::new("readelf").arg("-n").arg(&exe_path).output() {
        let text = String::from_utf8_lossy(&output.stdout);
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        assert!(
            text.contains(&format!("Build ID: {hex}")),
            "readelf -n shows another build id than {hex}:\n{text}"
        );
    }
}

#[test]
fn a_cut_short_or_forged_elf_file_gives_no_build_id_and_no_panic() {
    let file = elf_file(&BUILD_ID, true, true);
    for len in 0..file.len() {
        let id = elf::build_id(&file[..len]).expect("no I/O on a slice");
        assert!(
            id.is_none() || id.as_deref() == Some(&BUILD_ID[..]),
            "cut to {len} bytes: {id:?}"
        );
    }
    let mut forged = elf_file(&BUILD_ID, true, true);
    // 65535 program headers at the end of the address space.
    forged[0x20..0x28].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
    forged[0x38..0x3a].copy_from_slice(&u16::MAX.to_le_bytes());
    assert_eq!(
        elf::build_id(forged.as_slice()).expect("no I/O"),
        Some(BUILD_ID.to_vec()),
        "the sections still hold it"
    );
    // Notes that claim more than there is.
    let mut forged = elf_file(&BUILD_ID, true, false);
    let notes_at = 64 + 56;
    forged[notes_at..notes_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(elf::build_id(forged.as_slice()).expect("no I/O"), None);
    // A segment far beyond the file's end, and of an impossible size.
    let mut forged = elf_file(&BUILD_ID, true, false);
    forged[64 + 0x08..64 + 0x10].copy_from_slice(&u64::MAX.to_le_bytes());
    forged[64 + 0x20..64 + 0x28].copy_from_slice(&u64::MAX.to_le_bytes());
    assert_eq!(elf::build_id(forged.as_slice()).expect("no I/O"), None);
}

#[test]
fn a_file_that_is_not_a_64_bit_little_endian_elf_file_has_no_build_id() {
    let dir = TempDir::new("not-elf");
    let script = dir.path().join("script.sh");
    fs::write(&script, "#!/bin/sh\necho hi\n").expect("write");
    assert_eq!(read_elf_build_id(&script).expect("readable"), None);
    let empty = dir.path().join("empty");
    fs::write(&empty, "").expect("write");
    assert_eq!(read_elf_build_id(&empty).expect("readable"), None);
    let mut big_endian = elf_file(&BUILD_ID, true, true);
    big_endian[5] = 2;
    assert_eq!(elf::build_id(big_endian.as_slice()).expect("no I/O"), None);
    assert!(
        read_elf_build_id(&dir.path().join("missing")).is_err(),
        "a file that cannot be opened is an error"
    );
}

// Program keys.

#[test]
fn a_symbolic_link_names_the_program_it_links_to() {
    let dir = TempDir::new("symlink");
    let python = dir.path().join("python3.12");
    write_executable(&python, &elf_file(&BUILD_ID, true, true));
    symlink("python3.12", dir.path().join("python3")).expect("symlink");
    let key = ProgramKey::from_exe(&dir.path().join("python3"), &strings(&["-u", "train.py"]))
        .expect("a key");
    assert_eq!(key.as_str(), format!("python3.12-{BUILD_ID_HEX}-train.py"));

    // The test binary, through a link of another name.
    let exe = std::env::current_exe().expect("the test binary");
    symlink(&exe, dir.path().join("my_link")).expect("symlink");
    let through_link = ProgramKey::from_exe(&dir.path().join("my_link"), &[]).expect("a key");
    let direct = ProgramKey::from_exe(&exe, &[]).expect("a key");
    assert_eq!(through_link, direct);
    assert!(!through_link.as_str().contains("my_link"), "{through_link}");
    assert!(
        !through_link.as_str().contains(NO_BUILD_ID_PART),
        "{through_link}"
    );
}

const NO_BUILD_ID_PART: &str = "nobuildid";

#[test]
fn python_options_are_passed_over_to_the_script_or_module() {
    let id = Some(&BUILD_ID[..]);
    for (args, expected) in [
        (&["train.py"][..], "-train.py"),
        (&["-u", "-O", "../src/train.py", "--lr", "3"], "-train.py"),
        (&["-X", "dev", "-W", "ignore", "train.py"], "-train.py"),
        (
            &["-Wignore", "-Xfrozen_modules=off", "train.py"],
            "-train.py",
        ),
        (&["-uO", "train.py"], "-train.py"),
        (
            &["-m", "torch.distributed.run", "train.py"],
            "-torch.distributed.run",
        ),
        (&["-um", "pytest"], "-pytest"),
        (&["-mpytest", "-x"], "-pytest"),
        (&["-c", "import torch"], "-c"),
        (&["-", "<", "x"], "-stdin"),
        (&["--", "-odd-name.py"], "--odd-name.py"),
        (&["--check-hash-based-pycs", "never", "a.py"], "-a.py"),
        (&[], ""),
        (&["-i"], ""),
    ] {
        let key = ProgramKey::from_parts("python3.12", id, &strings(args));
        assert_eq!(
            key.as_str(),
            format!("python3.12-{BUILD_ID_HEX}{expected}"),
            "python3.12 {args:?}"
        );
    }
}

#[test]
fn other_interpreters_take_their_script_and_other_programs_none() {
    for (name, args, expected) in [
        ("bash", &["-x", "run.sh", "a"][..], "bash-nobuildid-run.sh"),
        (
            "bash",
            &["-o", "pipefail", "run.sh"],
            "bash-nobuildid-run.sh",
        ),
        ("sh", &["-c", "echo hi"], "sh-nobuildid-c"),
        ("dash", &["-ec", "echo hi"], "dash-nobuildid-c"),
        ("zsh", &[], "zsh-nobuildid"),
        ("perl", &["-I", "lib", "tool.pl"], "perl-nobuildid-tool.pl"),
        ("perl5.36", &["-ne", "print"], "perl5.36-nobuildid-e"),
        (
            "ruby3.1",
            &["-r", "json", "app.rb"],
            "ruby3.1-nobuildid-app.rb",
        ),
        (
            "node",
            &["--require", "ts-node/register", "server.js"],
            "node-nobuildid-server.js",
        ),
        ("node", &["-p", "1+1"], "node-nobuildid-e"),
        (
            "ld-linux-x86-64.so.2",
            &["--library-path", "/opt/lib", "/usr/bin/app", "x"],
            "ld-linux-x86-64.so.2-nobuildid-app",
        ),
        // Not interpreters: their arguments are data, not the program.
        ("shred", &["secret.txt"], "shred-nobuildid"),
        ("my_app", &["train.py"], "my_app-nobuildid"),
        ("pythonic", &["x.py"], "pythonic-nobuildid"),
    ] {
        let key = ProgramKey::from_parts(name, None, &strings(args));
        assert_eq!(key.as_str(), expected, "{name} {args:?}");
    }
}

#[test]
fn characters_outside_the_portable_set_become_underscores() {
    let key = ProgramKey::from_parts("my app+1", Some(&[0xab, 0xcd]), &[]);
    assert_eq!(
        key.as_str(),
        "my_app_1-abcd00000000",
        "a short build id is padded"
    );
    let key = ProgramKey::from_parts("python3", None, &strings(&["dir/wéird name!.py"]));
    assert_eq!(key.as_str(), "python3-nobuildid-w_ird_name_.py");
    let key = ProgramKey::from_parts(".hidden", None, &[]);
    assert_eq!(
        key.as_str(),
        "_hidden-nobuildid",
        "no key is a hidden folder"
    );
    let long = "x".repeat(300);
    let key = ProgramKey::from_parts("python3", None, std::slice::from_ref(&long));
    assert!(
        key.as_str().len() < 255,
        "a key is a file name: {}",
        key.as_str().len()
    );
    let key = ProgramKey::from_parts(&long, None, &[]);
    assert!(
        key.as_str().len() < 255,
        "a key is a file name: {}",
        key.as_str().len()
    );
}

#[test]
fn a_script_is_keyed_by_the_interpreter_its_first_line_names() {
    let dir = TempDir::new("shebang");
    let python = dir.path().join("python3.12");
    write_executable(&python, &elf_file(&BUILD_ID, true, true));
    let direct = dir.path().join("direct.py");
    write_executable(
        &direct,
        format!("#!{} -u\nprint()\n", python.display()).as_bytes(),
    );
    let key = ProgramKey::from_exe(&direct, &strings(&["--epochs", "3"])).expect("a key");
    assert_eq!(key.as_str(), format!("python3.12-{BUILD_ID_HEX}-direct.py"));

    let via_env = dir.path().join("via_env.py");
    write_executable(&via_env, b"#!/usr/bin/env -S python3.12 -u\nprint()\n");
    let key = ProgramKey::from_exe_on(&via_env, &[], Some(dir.path().as_os_str())).expect("a key");
    assert_eq!(
        key.as_str(),
        format!("python3.12-{BUILD_ID_HEX}-via_env.py")
    );
}

#[test]
fn a_command_name_is_found_on_path_as_execvp_finds_it() {
    let dir = TempDir::new("path");
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    fs::create_dir_all(&first).expect("mkdir");
    fs::create_dir_all(&second).expect("mkdir");
    // Not executable: execvp passes it over.
    fs::write(first.join("my_tool"), elf_file(&[0xff; 20], true, true)).expect("write");
    write_executable(&second.join("my_tool"), &elf_file(&BUILD_ID, true, true));
    let path = std::env::join_paths([&first, &second]).expect("a PATH");
    assert_eq!(
        find_executable_on(OsStr::new("my_tool"), Some(&path)),
        Some(second.join("my_tool"))
    );
    let key = ProgramKey::of_command_on(
        OsStr::new("my_tool"),
        &[OsString::from("train.py")],
        Some(&path),
    )
    .expect("found on PATH");
    assert_eq!(key.as_str(), format!("my_tool-{BUILD_ID_HEX}"));
    // A name with a slash is a path, not looked up.
    let relative = OsStr::new("second/my_tool");
    assert_eq!(
        find_executable_on(relative, Some(&path)),
        Some(PathBuf::from(relative))
    );
    let error = ProgramKey::of_command_on(OsStr::new("no_such_tool"), &[], Some(&path))
        .expect_err("not on PATH");
    assert!(
        error.to_string().contains("no_such_tool"),
        "the error names the program: {error}"
    );
}

#[test]
fn this_process_is_keyed_by_its_executable() {
    let exe = std::env::current_exe().expect("the test binary");
    let by_exe = ProgramKey::from_exe(&exe, &[]).expect("a key");
    assert_eq!(ProgramKey::of_current_process().expect("a key"), by_exe);
    assert_eq!(
        ProgramKey::of_process(std::process::id()).expect("a key"),
        by_exe
    );
    assert_eq!(
        ProgramKey::of_command(exe.as_os_str(), &[]).expect("a key"),
        by_exe
    );
}

#[test]
fn a_key_read_back_is_checked_like_a_folder_name() {
    let key = key("python3.12-0123456789ab-train.py");
    let json = serde_json::to_string(&key).expect("serialize");
    assert_eq!(json, "\"python3.12-0123456789ab-train.py\"");
    assert_eq!(
        serde_json::from_str::<ProgramKey>(&json).expect("read back"),
        key
    );
    for bad in ["../etc", ".hidden", "", "a/b", "a b"] {
        assert!(
            serde_json::from_str::<ProgramKey>(&format!("{bad:?}")).is_err(),
            "{bad:?} must not be a key"
        );
    }
}

#[test]
fn a_key_is_named_by_its_executable_its_script_or_itself() {
    let script = key("python3.12-0123456789ab-train.py");
    for name in ["python3.12-0123456789ab-train.py", "python3.12", "train.py"] {
        assert!(script.is_named(name), "{script} is {name}");
    }
    for name in [
        "python3",
        "train",
        "py",
        "0123456789ab",
        "12-0123456789ab-train.py",
    ] {
        assert!(!script.is_named(name), "{script} is not {name}");
    }
    let plain = key("my-app-nobuildid");
    assert!(plain.is_named("my-app"));
    assert!(!plain.is_named("my"), "only the whole executable name");
    assert!(!plain.is_named("app"), "no script part to match");
}

// The store.

#[test]
fn a_saved_history_is_the_latest_of_its_program() {
    let dir = TempDir::new("save");
    let store = Store::open(dir.path().join("histories"), Retention::default()).expect("open");
    let program = key("python3.12-0123456789ab-train.py");
    let first = store.save(&program, &history(), 42, false).expect("save");
    // The same pid within the same millisecond: a new file all the same, and the later one.
    let second = store.save(&program, &history(), 42, false).expect("save");
    assert_ne!(first, second);
    assert!(first.exists() && second.exists());
    let name = second
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    assert!(
        name.len() == "1767225600000-42.hotpin".len() && name.ends_with("-42.hotpin"),
        "<13-digit ms>-<pid>.hotpin: {name}"
    );
    assert_eq!(
        second.parent(),
        Some(
            dir.path()
                .join("histories")
                .join(program.as_str())
                .as_path()
        )
    );
    let read = crate::dump::read(&second).expect("a whole history");
    assert_eq!(
        read.stats(),
        history().stats(),
        "the history saved is read back"
    );
    assert_eq!(
        store.latest("train.py").expect("lookup"),
        Some(second.clone())
    );
    assert_eq!(
        store.latest_of(&program).expect("lookup"),
        Some(second.clone())
    );
    assert_eq!(
        store.histories(program.as_str()).expect("lookup"),
        vec![second.clone(), first]
    );
    let programs = store.programs().expect("list");
    assert_eq!(programs.len(), 1);
    assert_eq!(
        (&programs[0].key, programs[0].histories, &programs[0].newest),
        (&program, 2, &second)
    );
    let bytes: u64 = store
        .histories_of(&program)
        .expect("list")
        .iter()
        .map(|path| fs::metadata(path).expect("stat").len())
        .sum();
    assert_eq!(programs[0].bytes, bytes);
}

#[test]
fn retention_by_count_deletes_the_oldest_histories_of_all_programs() {
    let dir = TempDir::new("count");
    let retention = Retention {
        max_histories: 3,
        max_bytes: u64::MAX,
    };
    let store = Store::open(dir.path(), retention).expect("open");
    let (old, new) = (key("old_app-nobuildid"), key("new_app-nobuildid"));
    let a = store.save(&old, &history(), 1, false).expect("save");
    let b = store.save(&old, &history(), 2, false).expect("save");
    let notes = dir.path().join(old.as_str()).join("notes.txt");
    fs::write(&notes, "mine").expect("write");
    let c = store.save(&new, &history(), 3, false).expect("save");
    let d = store.save(&new, &history(), 4, false).expect("save");
    assert!(!a.exists(), "the oldest is deleted at the fourth save");
    let e = store.save(&new, &history(), 5, false).expect("save");
    assert!(
        !b.exists(),
        "then the next oldest, of another program than the one saved"
    );
    assert!(
        notes.exists(),
        "files that are not histories are left alone"
    );
    assert!(
        dir.path().join(old.as_str()).exists(),
        "a folder holding a file of its own stays"
    );
    for kept in [&c, &d, &e] {
        assert!(
            kept.exists(),
            "{} is among the newest three",
            kept.display()
        );
    }
    fs::remove_file(&notes).expect("remove");
    let f = store.save(&new, &history(), 6, false).expect("save");
    assert_eq!(store.histories_of(&new).expect("list"), vec![f, e, d]);
    assert_eq!(store.programs().expect("list").len(), 1);
    // Tightened: enforce_retention alone keeps the newest.
    let store = Store::open(
        dir.path(),
        Retention {
            max_histories: 0,
            max_bytes: 0,
        },
    )
    .expect("open");
    assert_eq!(store.enforce_retention().expect("trim").len(), 2);
    assert_eq!(store.histories_of(&new).expect("list").len(), 1);
    assert!(
        !dir.path().join(old.as_str()).exists(),
        "a folder emptied by retention is removed"
    );
}

#[test]
fn retention_by_bytes_keeps_the_history_just_written_whatever_its_size() {
    let dir = TempDir::new("bytes");
    let program = key("my_app-0123456789ab");
    let size = {
        let store = Store::open(dir.path().join("measure"), Retention::default()).expect("open");
        let path = store.save(&program, &history(), 1, false).expect("save");
        fs::metadata(path).expect("stat").len()
    };
    let retention = Retention {
        max_histories: 1000,
        max_bytes: 2 * size + size / 2,
    };
    let store = Store::open(dir.path().join("store"), retention).expect("open");
    let saved: Vec<PathBuf> = (0..5)
        .map(|pid| store.save(&program, &history(), pid, false).expect("save"))
        .collect();
    assert_eq!(
        store.histories_of(&program).expect("list"),
        vec![saved[4].clone(), saved[3].clone()],
        "two histories fit in the bytes allowed"
    );
    let tiny = Store::open(
        dir.path().join("store"),
        Retention {
            max_histories: 1000,
            max_bytes: 1,
        },
    )
    .expect("open");
    let other = key("other-nobuildid");
    let last = tiny.save(&other, &history(), 9, false).expect("save");
    assert_eq!(
        tiny.histories_of(&other).expect("list"),
        vec![last],
        "kept alone"
    );
    assert!(tiny.histories_of(&program).expect("list").is_empty());
    assert!(!dir.path().join("store").join(program.as_str()).exists());
}

#[test]
fn a_program_is_found_by_its_executable_or_script_name_and_never_guessed() {
    let dir = TempDir::new("lookup");
    let store = Store::open(dir.path(), Retention::default()).expect("open");
    let train = key("python3.12-0123456789ab-train.py");
    let eval = key("python3.12-0123456789ab-eval.py");
    let app = key("my_app-aaaaaaaaaaaa");
    let mut latest = Vec::new();
    for program in [&train, &eval, &app] {
        latest.push(store.save(program, &history(), 1, false).expect("save"));
    }
    assert_eq!(
        store.find_program("train.py").expect("lookup"),
        Some(train.clone())
    );
    assert_eq!(
        store.latest("train.py").expect("lookup"),
        Some(latest[0].clone())
    );
    assert_eq!(
        store.latest("my_app").expect("lookup"),
        Some(latest[2].clone())
    );
    assert_eq!(
        store.latest(app.as_str()).expect("lookup"),
        Some(latest[2].clone())
    );
    assert_eq!(
        store.latest("app").expect("lookup"),
        None,
        "no part of a name"
    );
    assert_eq!(store.latest("nothing").expect("lookup"), None);
    assert_eq!(
        store.histories("nothing").expect("lookup"),
        Vec::<PathBuf>::new()
    );
    let error = store.latest("python3.12").expect_err("two programs");
    let message = error.to_string();
    assert!(
        matches!(&error, StoreError::Ambiguous { matches, .. } if matches == &[eval.clone(), train.clone()]),
        "{error:?}"
    );
    assert!(
        message.contains(train.as_str()) && message.contains(eval.as_str()),
        "the error lists the programs: {message}"
    );
}

#[test]
fn reading_a_missing_store_finds_nothing_and_creates_nothing() {
    let dir = TempDir::new("missing");
    let root = dir.path().join("never-made");
    let store = Store::open_existing(&root);
    assert_eq!(store.latest("my_app").expect("lookup"), None);
    assert_eq!(
        store.latest_of(&key("my_app-nobuildid")).expect("lookup"),
        None
    );
    assert!(store.programs().expect("list").is_empty());
    assert!(!root.exists(), "a reader creates nothing");
}

#[test]
fn a_store_that_cannot_be_made_names_its_folder() {
    let dir = TempDir::new("cannot");
    let file = dir.path().join("a-file");
    fs::write(&file, "").expect("write");
    let root = file.join("histories");
    let error = Store::open(&root, Retention::default()).expect_err("under a file");
    assert!(
        error.to_string().contains(&root.display().to_string()),
        "the error names the folder: {error}"
    );
}

/// Script names a user controls (`python3.12 NAME`), as the daemon keys them, never name
/// anything but one folder right inside the store: no `/`, no `..`, no hidden name, no
/// control character, within a file name's length (#25, the store as an attack surface).
#[test]
fn any_script_name_keys_one_folder_inside_the_store() {
    let dir = TempDir::new("hostile");
    let python = dir.path().join("python3.12");
    write_executable(&python, &elf_file(&BUILD_ID, true, true));
    let root = Path::new("/var/lib/hotpin/histories");
    let mut names: Vec<String> = [
        "..",
        "../..",
        "../../etc/passwd",
        "/etc/shadow",
        ".hidden",
        "a/../../b",
        "\n",
        "a\nb",
        "é✓",
        "x\0y",
        "-",
        "--",
        ".",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push("a".repeat(5000));
    names.push("../".repeat(400));
    // Random names from bytes a file name may hold and worse (a fixed xorshift: repeatable).
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let alphabet: Vec<char> = "./\\\n\t -_~é\u{202e}$*?aZ09".chars().collect();
    for _ in 0..2000 {
        let mut name = String::new();
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        for _ in 0..(state % 300) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            name.push(alphabet[(state % alphabet.len() as u64) as usize]);
        }
        names.push(name);
    }
    for name in names {
        let args = [name.clone()];
        let Ok(key) = ProgramKey::from_exe_on(&python, &args, None) else {
            continue;
        };
        let folder = root.join(key.as_str());
        assert_eq!(folder.parent(), Some(root), "{name:?} -> {key}");
        assert!(
            !key.as_str().starts_with('.')
                && !key.as_str().contains('/')
                && key.as_str().len() <= 255
                && key.as_str().chars().all(|c| c.is_ascii_graphic()),
            "{name:?} -> {key:?}"
        );
        // Read back as a stored key it is accepted: the same checks hold both ways.
        assert_eq!(
            ProgramKey::try_from(key.as_str().to_string()).expect("a valid key"),
            key
        );
    }
}

/// A symbolic link standing as a program's folder is never written through (#41): the save
/// is refused, saying why, and nothing lands where the link points.
#[test]
fn a_link_standing_as_a_program_folder_is_not_written_through() {
    let dir = TempDir::new("store-folder-link");
    let store = Store::open(dir.path().join("histories"), Retention::default()).expect("open");
    let elsewhere = dir.path().join("elsewhere");
    fs::create_dir_all(&elsewhere).expect("a folder");
    let program = key("app-0123456789ab");
    std::os::unix::fs::symlink(&elsewhere, store.root().join(program.as_str())).expect("a link");
    let refused = store
        .save(&program, &history(), 42, false)
        .expect_err("refused");
    assert!(
        error_chain(&refused).contains("symbolic link"),
        "{refused:?}"
    );
    assert_eq!(fs::read_dir(&elsewhere).expect("list").count(), 0);
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(next) = source {
        text.push_str(": ");
        text.push_str(&next.to_string());
        source = next.source();
    }
    text
}
