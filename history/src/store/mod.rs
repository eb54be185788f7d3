//! The history store: where `tracer daemon` keeps the histories of the programs it traces, a
//! folder per program ([`ProgramKey`]: executable, build id and script), a file per process
//! that exited (`<unix time in ms, 13 digits>-<pid>.hotpin`, compact binary), the oldest
//! deleted beyond a count and a size ([`Retention`]). `tracer report PROGRAM`,
//! `hotpin run --mode use` and the interposer's use mode find a program's latest history
//! there.
//!
//! ```text
//! /var/lib/hotpin/histories/
//!   my_app-1f2e3d4c5b6a/1767225600000-4242.hotpin
//!   python3.12-0a1b2c3d4e5f-train.py/1767225600123-4250.hotpin
//! ```
//!
//! One process writes a store (the daemon); any may read it, as a history file only ever
//! appears whole (written to a temporary name, then renamed).

mod elf;
mod program;

use std::{
    collections::BTreeSet,
    fs, io,
    os::unix::fs::DirBuilderExt as _,
    path::{Path, PathBuf},
    sync::{Mutex, PoisonError},
    time::{SystemTime, UNIX_EPOCH},
};

use serde::Serialize;

pub use self::{
    elf::read_elf_build_id,
    program::{InvalidProgramKey, ProgramKey, find_executable},
};
use crate::{
    MemHistory,
    dump::{self, DumpError, Format},
};

/// Where the store is unless `HOTPIN_STORE` says otherwise.
pub const DEFAULT_STORE: &str = "/var/lib/hotpin/histories";
/// The environment variable naming the store's folder.
pub const STORE_VARIABLE: &str = "HOTPIN_STORE";
/// The extension of the history files in a store; other files are left alone.
pub const HISTORY_EXTENSION: &str = "hotpin";

/// The store's folder: `$HOTPIN_STORE` when set and not empty, else [`DEFAULT_STORE`].
pub fn default_root() -> PathBuf {
    std::env::var_os(STORE_VARIABLE)
        .filter(|root| !root.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_STORE), PathBuf::from)
}

/// How much a store keeps: beyond either bound, the oldest histories, of any program, are
/// deleted (the one just saved never is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Most histories kept, all programs together.
    pub max_histories: usize,
    /// Most bytes of histories kept, all programs together.
    pub max_bytes: u64,
}

impl Default for Retention {
    /// 1000 histories, 10 GiB.
    fn default() -> Self {
        Retention {
            max_histories: 1000,
            max_bytes: 10 << 30,
        }
    }
}

/// A program in a store: its key, how many histories of it are kept, their bytes, and the
/// newest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProgramEntry {
    pub key: ProgramKey,
    pub histories: usize,
    pub bytes: u64,
    pub newest: PathBuf,
}

/// Why the store could not be opened, written or read; always names the path.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the history store {}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the history store {} cannot be written", root.display())]
    NotWritable {
        root: PathBuf,
        #[source]
        source: DumpError,
    },
    #[error("cannot read the history store at {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot save a history in the store")]
    Save(#[source] DumpError),
    #[error("cannot delete the old history {}", path.display())]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("saved {}, but could not keep the store within its retention", saved.display())]
    RetentionFailed {
        saved: PathBuf,
        #[source]
        source: Box<StoreError>,
    },
    #[error("cannot tell which program {} is", path.display())]
    Program {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: no such file, nor an executable of that name on PATH", program.to_string_lossy())]
    NotFound { program: std::ffi::OsString },
    #[error(
        "{program:?} names several programs in the history store {}: {}; give the whole name",
        root.display(),
        matches.iter().map(ProgramKey::as_str).collect::<Vec<_>>().join(", ")
    )]
    Ambiguous {
        program: String,
        root: PathBuf,
        matches: Vec<ProgramKey>,
    },
}

/// A history store at a folder, with its retention.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    retention: Retention,
    /// Held while a history is saved and the store trimmed: two saves of one process never
    /// race for a name, nor one deletes the folder the other writes in.
    writing: Mutex<()>,
}

/// A history file found in the store.
struct StoredHistory {
    path: PathBuf,
    /// The time in its name (else its modification time), in ms since the Unix epoch.
    time_ms: u64,
    modified: SystemTime,
    bytes: u64,
}

impl Store {
    /// Opens the store at `root` for writing: creates the folder (and its parents, mode 0755)
    /// when missing, and checks that a history can be written there.
    pub fn open(root: impl Into<PathBuf>, retention: Retention) -> Result<Self, StoreError> {
        let root = root.into();
        create_folder(&root)?;
        dump::check_directory(&root).map_err(|source| StoreError::NotWritable {
            root: root.clone(),
            source,
        })?;
        Ok(Self::at(root, retention))
    }

    /// The store at `root` as it is, for reading: nothing is created or checked, and a
    /// missing folder holds no histories.
    pub fn open_existing(root: impl Into<PathBuf>) -> Self {
        Self::at(root.into(), Retention::default())
    }

    fn at(root: PathBuf, retention: Retention) -> Self {
        Store {
            root,
            retention,
            writing: Mutex::new(()),
        }
    }

    /// The store's folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// Saves `history`, of process `pid` of the program `key`, as
    /// `<root>/<key>/<unix time in ms>-<pid>.hotpin` (compact binary; `verbose` keeps each
    /// allocation's event timeline), then deletes the oldest histories beyond the retention.
    /// The file appears whole or not at all. Its time is later than that of every history
    /// in the store, so histories sort in the order they were saved, whatever the clock did.
    /// Returns its path.
    pub fn save(
        &self,
        key: &ProgramKey,
        history: &MemHistory,
        pid: u32,
        verbose: bool,
    ) -> Result<PathBuf, StoreError> {
        let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let folder = self.root.join(key.as_str());
        create_folder(&folder)?;
        let newest = self
            .all_histories()?
            .iter()
            .map(|stored| stored.time_ms)
            .max();
        let time_ms = newest.map_or(unix_ms(), |newest| unix_ms().max(newest.saturating_add(1)));
        let path = folder.join(format!("{time_ms:013}-{pid}.{HISTORY_EXTENSION}"));
        dump::write(history, &path, Format::Binary, verbose).map_err(StoreError::Save)?;
        self.trim(Some(&path))
            .map_err(|source| StoreError::RetentionFailed {
                saved: path.clone(),
                source: Box::new(source),
            })?;
        Ok(path)
    }

    /// Deletes the oldest histories of the whole store (by the time in their names, then
    /// their modification times) until it holds at most `max_histories` of them and
    /// `max_bytes`, keeping the newest whatever its size, and removes the program folders
    /// left empty. Files that are not `*.hotpin` histories are left alone. Returns the
    /// histories deleted.
    pub fn enforce_retention(&self) -> Result<Vec<PathBuf>, StoreError> {
        let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        self.trim(None)
    }

    /// [`Store::enforce_retention`], keeping `keep` (else the newest history).
    fn trim(&self, keep: Option<&Path>) -> Result<Vec<PathBuf>, StoreError> {
        let folders = self.program_folders()?;
        let mut histories = Vec::new();
        for (_, folder) in &folders {
            histories.extend(self.histories_in(folder)?);
        }
        sort_oldest_first(&mut histories);
        let keep = keep
            .map(Path::to_path_buf)
            .or_else(|| histories.last().map(|newest| newest.path.clone()));
        let mut count = histories.len();
        let mut bytes: u64 = histories.iter().map(|stored| stored.bytes).sum();
        let mut removed = Vec::new();
        for stored in &histories {
            if count <= self.retention.max_histories && bytes <= self.retention.max_bytes {
                break;
            }
            if keep.as_ref() == Some(&stored.path) {
                continue;
            }
            match fs::remove_file(&stored.path) {
                Ok(()) => removed.push(stored.path.clone()),
                // Deleted meanwhile: it counts no more either.
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(StoreError::Remove {
                        path: stored.path.clone(),
                        source,
                    });
                }
            }
            count -= 1;
            bytes -= stored.bytes;
        }
        let removed_set: BTreeSet<&PathBuf> = removed.iter().collect();
        let kept: BTreeSet<&Path> = histories
            .iter()
            .filter(|stored| !removed_set.contains(&stored.path))
            .filter_map(|stored| stored.path.parent())
            .collect();
        for (_, folder) in &folders {
            if !kept.contains(folder.as_path()) {
                // Fails, as it should, when the folder holds anything else.
                let _ = fs::remove_dir(folder);
            }
        }
        Ok(removed)
    }

    /// The programs with histories in the store, by key.
    pub fn programs(&self) -> Result<Vec<ProgramEntry>, StoreError> {
        let mut programs = Vec::new();
        for (key, folder) in self.program_folders()? {
            let histories = self.histories_in(&folder)?;
            let newest = histories
                .iter()
                .max_by(|a, b| order(a).cmp(&order(b)))
                .map(|stored| stored.path.clone());
            if let Some(newest) = newest {
                programs.push(ProgramEntry {
                    key,
                    histories: histories.len(),
                    bytes: histories.iter().map(|stored| stored.bytes).sum(),
                    newest,
                });
            }
        }
        programs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(programs)
    }

    /// The program a user means by `program`: the key itself when the store has a folder of
    /// that name, else the one program with histories whose executable or script is named so
    /// (`my_app`, `python3.12`, `train.py`; see [`ProgramKey::is_named`]). None when no
    /// program is; an error naming them when several are.
    pub fn find_program(&self, program: &str) -> Result<Option<ProgramKey>, StoreError> {
        let wanted = program::sanitize(program);
        if let Ok(key) = ProgramKey::try_from(wanted.clone())
            && self.root.join(key.as_str()).is_dir()
        {
            return Ok(Some(key));
        }
        let mut matches: Vec<ProgramKey> = self
            .programs()?
            .into_iter()
            .map(|entry| entry.key)
            .filter(|key| key.is_named(&wanted))
            .collect();
        match matches.len() {
            0 => Ok(None),
            1 => Ok(matches.pop()),
            _ => Err(StoreError::Ambiguous {
                program: program.to_owned(),
                root: self.root.clone(),
                matches,
            }),
        }
    }

    /// The histories of the program a user means by `program` ([`Store::find_program`]),
    /// newest first; none when no program is named so.
    pub fn histories(&self, program: &str) -> Result<Vec<PathBuf>, StoreError> {
        match self.find_program(program)? {
            Some(key) => self.histories_of(&key),
            None => Ok(Vec::new()),
        }
    }

    /// The latest history of the program a user means by `program`.
    pub fn latest(&self, program: &str) -> Result<Option<PathBuf>, StoreError> {
        Ok(self.histories(program)?.into_iter().next())
    }

    /// The histories of the program `key` exactly, newest first.
    pub fn histories_of(&self, key: &ProgramKey) -> Result<Vec<PathBuf>, StoreError> {
        let mut histories = self.histories_in(&self.root.join(key.as_str()))?;
        sort_oldest_first(&mut histories);
        Ok(histories
            .into_iter()
            .rev()
            .map(|stored| stored.path)
            .collect())
    }

    /// The latest history of the program `key` exactly.
    pub fn latest_of(&self, key: &ProgramKey) -> Result<Option<PathBuf>, StoreError> {
        Ok(self.histories_of(key)?.into_iter().next())
    }

    /// The histories of the program `key` that user `uid` may start from, newest first:
    /// its own (the daemon gives each history to its run's user), then root's; never another
    /// user's (#41 item 4: any user's run of `cuda.py` became every user's latest history of
    /// it, and root's use mode pinned from one `nobody` made). Root takes only root's.
    pub fn histories_for_user(
        &self,
        key: &ProgramKey,
        uid: u32,
    ) -> Result<Vec<PathBuf>, StoreError> {
        use std::os::unix::fs::MetadataExt as _;
        let owned_by = |path: &PathBuf, owner: u32| {
            std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file() && meta.uid() == owner)
        };
        let all = self.histories_of(key)?;
        let mut usable: Vec<PathBuf> = all.iter().filter(|p| owned_by(p, uid)).cloned().collect();
        if uid != 0 {
            usable.extend(all.into_iter().filter(|p| owned_by(p, 0)));
        }
        Ok(usable)
    }

    /// The histories of every program.
    fn all_histories(&self) -> Result<Vec<StoredHistory>, StoreError> {
        let mut histories = Vec::new();
        for (_, folder) in self.program_folders()? {
            histories.extend(self.histories_in(&folder)?);
        }
        Ok(histories)
    }

    /// The folders of the store named as program keys; none when the store does not exist.
    fn program_folders(&self) -> Result<Vec<(ProgramKey, PathBuf)>, StoreError> {
        let mut folders = Vec::new();
        for entry in read_folder(&self.root)? {
            let Ok(key) = entry
                .file_name()
                .into_string()
                .map_err(drop)
                .and_then(|name| ProgramKey::try_from(name).map_err(drop))
            else {
                continue;
            };
            // Not followed: a link in the store is not the store's.
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                folders.push((key, entry.path()));
            }
        }
        Ok(folders)
    }

    /// The history files in a program's folder: regular files named `*.hotpin`, not hidden
    /// (a history being written has a hidden temporary name). None when the folder does not
    /// exist.
    fn histories_in(&self, folder: &Path) -> Result<Vec<StoredHistory>, StoreError> {
        let mut histories = Vec::new();
        for entry in read_folder(folder)? {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Some(stem) = name.strip_suffix(&format!(".{HISTORY_EXTENSION}")) else {
                continue;
            };
            if stem.starts_with('.') {
                continue;
            }
            let metadata = match entry.metadata() {
                Ok(metadata) if metadata.is_file() => metadata,
                Ok(_) => continue,
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(StoreError::Read {
                        path: entry.path(),
                        source,
                    });
                }
            };
            let modified = metadata.modified().unwrap_or(UNIX_EPOCH);
            let time_ms = stem
                .split('-')
                .next()
                .filter(|time| !time.is_empty() && time.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|time| time.parse().ok())
                .unwrap_or_else(|| ms_since_epoch(modified));
            histories.push(StoredHistory {
                path: entry.path(),
                time_ms,
                modified,
                bytes: metadata.len(),
            });
        }
        Ok(histories)
    }
}

/// What orders histories from oldest to newest.
fn order(stored: &StoredHistory) -> (u64, SystemTime, &Path) {
    (stored.time_ms, stored.modified, &stored.path)
}

fn sort_oldest_first(histories: &mut [StoredHistory]) {
    histories.sort_by(|a, b| order(a).cmp(&order(b)));
}

/// The entries of `folder`; none when it does not exist.
fn read_folder(folder: &Path) -> Result<Vec<fs::DirEntry>, StoreError> {
    let error = |source| StoreError::Read {
        path: folder.to_path_buf(),
        source,
    };
    let entries = match fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(source) if source.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(error(source)),
    };
    entries.collect::<Result<_, _>>().map_err(error)
}

/// Creates `folder` and its missing parents, mode 0755 (less the umask).
/// Makes a program's folder; one that is there as a symbolic link (or anything but a folder)
/// is refused, never written through (#41: a link standing as a program folder had the
/// history written where it pointed).
fn create_folder(folder: &Path) -> Result<(), StoreError> {
    let refused = |source| StoreError::Create {
        path: folder.to_path_buf(),
        source,
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(folder)
        .map_err(refused)?;
    match fs::symlink_metadata(folder) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(refused(std::io::Error::other(
            "it is a symbolic link or not a folder: the store never follows links",
        ))),
        Err(source) => Err(refused(source)),
    }
}

fn unix_ms() -> u64 {
    ms_since_epoch(SystemTime::now())
}

fn ms_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

#[cfg(test)]
mod tests;
