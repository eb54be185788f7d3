//! Which program a history is of ([`ProgramKey`]), from an executable and its arguments, a
//! running process, or a command about to be started.

use std::{
    ffi::{OsStr, OsString},
    fmt, fs,
    io::Read as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::{StoreError, elf::read_elf_build_id};

/// Hex digits of the build id in a key.
const BUILD_ID_DIGITS: usize = 12;
/// The build id part of the key of an executable without one (or one we could not read).
const NO_BUILD_ID: &str = "nobuildid";
/// Most characters of the executable's or the script's name kept in a key: a key is a file
/// name, at most 255 bytes.
const MAX_PART_CHARS: usize = 100;
/// Longest key: a file name.
const MAX_KEY_BYTES: usize = 255;
/// Interpreters whose script is part of the program: their file name is one of these, alone or
/// followed by a version (`python3.12`, `perl5.36`). The dynamic loader run as a command
/// (`ld-linux-x86-64.so.2 PROGRAM`, as `ldd` and some launchers do) counts as one: the program
/// it loads is the program.
const INTERPRETERS: &[&str] = &[
    "python",
    "perl",
    "ruby",
    "node",
    "bash",
    "sh",
    "dash",
    "zsh",
    "ld-linux-x86-64.so",
    "ld-linux-aarch64.so",
];
/// Levels of `#!` scripts followed, as Linux does (its limit is 4 interpreters deep).
const MAX_SHEBANG_DEPTH: usize = 4;
/// Bytes of a script's first line the kernel reads for its `#!` line.
const SHEBANG_BYTES: usize = 256;
/// The search path execvp uses when `PATH` is not set (glibc's `_CS_PATH`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Which program a history is of, and the name of its folder in the store: the executable's
/// file name (symbolic links resolved) and the first 12 hex digits of its GNU build id
/// (`nobuildid` without one), then, for an interpreter, the script it runs:
/// `my_app-1f2e3d4c5b6a`, `python3.12-0a1b2c3d4e5f-train.py`. Only ASCII letters, digits,
/// `.`, `_` and `-`, never starting with `.`: any other character becomes `_`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ProgramKey(String);

/// A string that cannot be a [`ProgramKey`] (and so must not name a folder in the store).
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not a program key (ASCII letters, digits, '.', '_' and '-' only, not starting with '.')"
)]
pub struct InvalidProgramKey(pub String);

impl ProgramKey {
    /// The key of the process that executing `exe` with `args` (its arguments after the
    /// program's name) starts: symbolic links are resolved (`python3` names `python3.12`),
    /// and a `#!` script is keyed by its interpreter and the script, as the kernel starts it
    /// (through `/usr/bin/env` too, looking the interpreter up on `PATH`).
    pub fn from_exe(exe: &Path, args: &[String]) -> Result<Self, StoreError> {
        Self::from_exe_on(exe, args, path_variable().as_deref())
    }

    /// The key of the running process `pid`, from `/proc/PID/exe` and `/proc/PID/cmdline`:
    /// the executable is read through `/proc`, so a process in another mount namespace (a
    /// container) is keyed by its own executable.
    pub fn of_process(pid: u32) -> Result<Self, StoreError> {
        Self::of_proc_dir(&PathBuf::from(format!("/proc/{pid}")))
    }

    /// The key of this process (`/proc/self`).
    pub fn of_current_process() -> Result<Self, StoreError> {
        Self::of_proc_dir(Path::new("/proc/self"))
    }

    /// The key of the process that `execvp(program, [program, args...])` would start: a
    /// `program` with a `/` is a path, any other is looked up on `PATH`.
    pub fn of_command(program: &OsStr, args: &[OsString]) -> Result<Self, StoreError> {
        Self::of_command_on(program, args, path_variable().as_deref())
    }

    /// The key as a string (the folder's name).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether a user who typed `program` means this key: the key itself, its executable's
    /// name (`my_app`, `python3.12`: the part before the build id) or its script's name
    /// (`train.py`: the part after it).
    pub fn is_named(&self, program: &str) -> bool {
        let key = self.0.as_str();
        if key == program {
            return true;
        }
        // `<program>-<build id>` or `<program>-<build id>-<script>`.
        let names_executable = key
            .strip_prefix(program)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|rest| {
                let id = rest.split_once('-').map_or(rest, |(id, _)| id);
                is_build_id_part(id)
            });
        // `<executable>-<build id>-<program>`.
        let names_script = key
            .strip_suffix(program)
            .and_then(|rest| rest.strip_suffix('-'))
            .and_then(|rest| rest.rsplit_once('-'))
            .is_some_and(|(executable, id)| !executable.is_empty() && is_build_id_part(id));
        names_executable || names_script
    }

    pub(super) fn from_exe_on(
        exe: &Path,
        args: &[String],
        path_variable: Option<&OsStr>,
    ) -> Result<Self, StoreError> {
        let mut exe = exe.to_path_buf();
        let mut args = args.to_vec();
        for _ in 0..MAX_SHEBANG_DEPTH {
            match interpreter_of(&exe, &args, path_variable) {
                Some((interpreter, interpreter_args)) => {
                    (exe, args) = (interpreter, interpreter_args)
                }
                None => break,
            }
        }
        let canonical = fs::canonicalize(&exe).map_err(|source| StoreError::Program {
            path: exe.clone(),
            source,
        })?;
        let name = canonical.file_name().map_or_else(
            || canonical.to_string_lossy(),
            |name| name.to_string_lossy(),
        );
        // Unreadable (an executable that is not readable, only runnable): keyed without.
        let build_id = read_elf_build_id(&canonical).ok().flatten();
        Ok(Self::from_parts(&name, build_id.as_deref(), &args))
    }

    pub(super) fn of_command_on(
        program: &OsStr,
        args: &[OsString],
        path_variable: Option<&OsStr>,
    ) -> Result<Self, StoreError> {
        let exe =
            find_executable_on(program, path_variable).ok_or_else(|| StoreError::NotFound {
                program: program.to_os_string(),
            })?;
        let args: Vec<String> = args
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        Self::from_exe_on(&exe, &args, path_variable)
    }

    fn of_proc_dir(dir: &Path) -> Result<Self, StoreError> {
        let exe = dir.join("exe");
        let proc_error = |path: PathBuf| move |source| StoreError::Program { path, source };
        // The kernel's path of the executable, links resolved, in the process's own mount
        // namespace: only its file name is used.
        let target = fs::read_link(&exe).map_err(proc_error(exe.clone()))?;
        let name = target
            .file_name()
            .map_or_else(|| target.to_string_lossy(), |name| name.to_string_lossy());
        let name = name.strip_suffix(" (deleted)").unwrap_or(&name);
        // Opening /proc/PID/exe opens the executable itself, whichever namespace it is in.
        let build_id = read_elf_build_id(&exe).ok().flatten();
        let cmdline_path = dir.join("cmdline");
        let cmdline = fs::read(&cmdline_path).map_err(proc_error(cmdline_path))?;
        let cmdline = cmdline.strip_suffix(&[0]).unwrap_or(&cmdline);
        let args: Vec<String> = cmdline
            .split(|&byte| byte == 0)
            .skip(1)
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect();
        Ok(Self::from_parts(name, build_id.as_deref(), &args))
    }

    /// The key of an executable named `name` with `build_id`, run with `args`.
    pub(super) fn from_parts(name: &str, build_id: Option<&[u8]>, args: &[String]) -> Self {
        let mut key = key_part(name);
        key.push('-');
        match build_id {
            Some(id) => {
                let mut hex: String = id
                    .iter()
                    .take(BUILD_ID_DIGITS / 2)
                    .map(|byte| format!("{byte:02x}"))
                    .collect();
                // A build id under 6 bytes (no linker makes one) is padded with zeros.
                while hex.len() < BUILD_ID_DIGITS {
                    hex.push('0');
                }
                key.push_str(&hex);
            }
            None => key.push_str(NO_BUILD_ID),
        }
        if let Some(script) = interpreted_script(name, args) {
            key.push('-');
            key.push_str(&key_part(&script));
        }
        ProgramKey(key)
    }
}

impl fmt::Display for ProgramKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for ProgramKey {
    type Error = InvalidProgramKey;

    fn try_from(key: String) -> Result<Self, Self::Error> {
        if !key.is_empty() && key.len() <= MAX_KEY_BYTES && sanitize(&key) == key {
            Ok(ProgramKey(key))
        } else {
            Err(InvalidProgramKey(key))
        }
    }
}

impl From<ProgramKey> for String {
    fn from(key: ProgramKey) -> Self {
        key.0
    }
}

/// `text` with every character outside `[A-Za-z0-9._-]`, and a leading `.` (a hidden
/// file), made `_`.
pub(super) fn sanitize(text: &str) -> String {
    text.chars()
        .enumerate()
        .map(|(i, c)| match c {
            '.' if i == 0 => '_',
            'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '_',
        })
        .collect()
}

/// An executable's or a script's name as a part of a key: [`sanitize`]d and cut to
/// [`MAX_PART_CHARS`].
fn key_part(name: &str) -> String {
    let mut part = sanitize(name);
    part.truncate(MAX_PART_CHARS);
    part
}

/// Whether `part` is a key's build id part: 12 lowercase hex digits, or `nobuildid`.
fn is_build_id_part(part: &str) -> bool {
    part == NO_BUILD_ID
        || (part.len() == BUILD_ID_DIGITS
            && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// The interpreter family of an executable named `name`, when its script is part of the
/// program: one of [`INTERPRETERS`], alone or followed by a version of digits and dots
/// (`python3.12`; not `shred`, nor `shuf`).
fn interpreter_family(name: &str) -> Option<&'static str> {
    INTERPRETERS.iter().copied().find(|family| {
        name.strip_prefix(family)
            .is_some_and(|version| version.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
    })
}

/// The script an interpreter named `name` runs with `args`, as its key names it: the file
/// name of its first argument that is not an option (nor an option's value); for python,
/// `-m MODULE` gives the module and `-c` gives `c`; a shell's `-c` gives `c`, and perl's,
/// ruby's and node's `-e` gives `e`; `-` (standard input) gives `stdin`. None for a program
/// that is not an interpreter, or an interpreter without a script (an interactive one).
fn interpreted_script(name: &str, args: &[String]) -> Option<String> {
    let family = interpreter_family(name)?;
    let shell = matches!(family, "bash" | "sh" | "dash" | "zsh");
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "-" {
            return Some("stdin".into());
        }
        if arg == "--" {
            return args.next().and_then(|script| script_name(script));
        }
        let Some(flags) = arg.strip_prefix('-') else {
            return script_name(arg);
        };
        if let Some(long) = flags.strip_prefix('-') {
            match long {
                "eval" | "print" if family == "node" => return Some("e".into()),
                // Long options that take the next argument as their value.
                "check-hash-based-pycs"
                | "require"
                | "import"
                | "rcfile"
                | "init-file"
                | "library-path"
                | "preload"
                | "audit"
                | "argv0"
                | "inhibit-rpath" => {
                    args.next();
                }
                _ => {}
            }
            continue;
        }
        if family == "python" {
            // Single-letter flags, clustered (`-uO`); X, W and Q take a value, attached or next.
            for (i, flag) in flags.char_indices() {
                let attached = &flags[i + flag.len_utf8()..];
                match flag {
                    'c' => return Some("c".into()),
                    'm' if !attached.is_empty() => return Some(attached.into()),
                    'm' => return args.next().cloned(),
                    'X' | 'W' | 'Q' => {
                        if attached.is_empty() {
                            args.next();
                        }
                        break;
                    }
                    _ => {}
                }
            }
        } else if shell {
            // `-c`, alone or clustered (`-xc`); `-o OPTION` and bash's `-O OPTION`.
            if flags.contains('c') {
                return Some("c".into());
            }
            if flags == "o" || flags == "O" {
                args.next();
            }
        } else {
            // perl, ruby, node: `-e`, perl's `-E`, node's `-p`, and clusters ending in one
            // (`-ne`, `-lane`); `-I DIR`, `-r LIBRARY` take the next argument.
            let code = matches!(flags, "e" | "E")
                || (family == "node" && flags == "p")
                || (flags.len() <= 4
                    && flags.bytes().all(|b| b.is_ascii_lowercase())
                    && flags.ends_with('e'));
            if code {
                return Some("e".into());
            }
            if flags == "I" || flags == "r" {
                args.next();
            }
        }
    }
    None
}

/// A script argument's file name (`train.py` of `../src/train.py`).
fn script_name(script: &str) -> Option<String> {
    Path::new(script)
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
}

/// The interpreter the kernel starts for a `#!` script `exe` run with `args`, and the
/// interpreter's arguments; None when `exe` is not such a script.
fn interpreter_of(
    exe: &Path,
    args: &[String],
    path_variable: Option<&OsStr>,
) -> Option<(PathBuf, Vec<String>)> {
    let mut first = Vec::with_capacity(SHEBANG_BYTES);
    fs::File::open(exe)
        .ok()?
        .take(SHEBANG_BYTES as u64)
        .read_to_end(&mut first)
        .ok()?;
    let line = first.strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next().unwrap_or(line);
    let line = String::from_utf8_lossy(line);
    let line = line.trim_matches([' ', '\t', '\r']);
    // Linux passes what follows the interpreter as one argument.
    let (interpreter, argument) = match line.split_once([' ', '\t']) {
        Some((interpreter, argument)) => (interpreter, Some(argument.trim_matches([' ', '\t']))),
        None => (line, None),
    };
    if interpreter.is_empty() {
        return None;
    }
    let script = exe.to_string_lossy().into_owned();
    if Path::new(interpreter).file_name() == Some(OsStr::new("env")) {
        // `#!/usr/bin/env python3`, or `#!/usr/bin/env -S python3 -u`: env starts the first
        // word that is neither an option nor a variable assignment, found on PATH.
        let argument = argument.unwrap_or_default();
        let words: Vec<&str> = match argument.strip_prefix("-S") {
            Some(split) => split.split_whitespace().collect(),
            None => vec![argument],
        };
        let start = words
            .iter()
            .position(|word| !word.starts_with('-') && !word.contains('='))?;
        let program = find_executable_on(OsStr::new(words[start]), path_variable)?;
        let mut interpreter_args: Vec<String> =
            words[start + 1..].iter().map(|w| (*w).to_owned()).collect();
        interpreter_args.push(script);
        interpreter_args.extend_from_slice(args);
        return Some((program, interpreter_args));
    }
    let mut interpreter_args: Vec<String> = argument
        .filter(|argument| !argument.is_empty())
        .map(str::to_owned)
        .into_iter()
        .collect();
    interpreter_args.push(script);
    interpreter_args.extend_from_slice(args);
    Some((PathBuf::from(interpreter), interpreter_args))
}

/// The file `execvp` runs for `program`: a name with a `/` is that path; any other is the
/// first executable regular file of that name in a `PATH` directory (`/bin:/usr/bin` when
/// `PATH` is unset; an empty entry is the current directory). None when there is none.
pub fn find_executable(program: &OsStr) -> Option<PathBuf> {
    find_executable_on(program, path_variable().as_deref())
}

pub(super) fn find_executable_on(
    program: &OsStr,
    path_variable: Option<&OsStr>,
) -> Option<PathBuf> {
    if program.is_empty() {
        return None;
    }
    if program.as_encoded_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    let path_variable = path_variable.unwrap_or(OsStr::new(DEFAULT_PATH));
    std::env::split_paths(path_variable)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                PathBuf::from(".").join(program)
            } else {
                dir.join(program)
            }
        })
        .find(|candidate| {
            fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

fn path_variable() -> Option<OsString> {
    std::env::var_os("PATH")
}
