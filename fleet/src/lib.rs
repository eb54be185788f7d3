//! Histories shared across a fleet through an S3-compatible object store (the `object_store`
//! crate, Apache Arrow's; no S3 client of our own).
//!
//! `s3://BUCKET/PREFIX` holds, per program, `PREFIX/<program key>/<unix ms>-<host>-<pid>.hotpin`:
//! the time first, so the latest sorts last; the host and the process keep writers of
//! different nodes apart (no two write one object). Credentials, region and endpoint come
//! from the usual AWS environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL` / `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`).
//!
//! Every call is bounded: an unreachable or slow store never holds the caller longer than the
//! wait it was opened with (2 s by default for `hotpin run`); it is an error the caller says
//! once and goes on without.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use futures_util::TryStreamExt as _;
use hotpin_history::{dump, store::ProgramKey};
use object_store::{
    ObjectStore, ObjectStoreExt as _, PutPayload, aws::AmazonS3Builder, path::Path as Key,
};

/// What `hotpin run` waits for the store at most, by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("{0:?} is not an object store address: give s3://BUCKET/PREFIX")]
    NotS3(String),
    #[error("the object store {url}: {source}")]
    Store {
        url: String,
        #[source]
        source: object_store::Error,
    },
    #[error("the object store {url} did not answer within {wait:?}")]
    TimedOut { url: String, wait: Duration },
    #[error("{key} in the object store is not a hotpin history: {source}")]
    NotAHistory {
        key: String,
        #[source]
        source: dump::DumpError,
    },
    #[error("{path}: {source}")]
    Local {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A fleet's store of histories.
pub struct Fleet {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: String,
    wait: Duration,
    runtime: tokio::runtime::Runtime,
}

impl Fleet {
    /// The store at `url` (`s3://BUCKET/PREFIX`), each call bounded by `wait`.
    pub fn open(url: &str, wait: Duration) -> Result<Self, FleetError> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| FleetError::NotS3(url.to_owned()))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(FleetError::NotS3(url.to_owned()));
        }
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        // An endpoint of the machine itself (a test's server, a local gateway) speaks http.
        if let Ok(endpoint) =
            std::env::var("AWS_ENDPOINT_URL").or_else(|_| std::env::var("AWS_ENDPOINT"))
        {
            let local = endpoint.starts_with("http://127.0.0.1")
                || endpoint.starts_with("http://localhost")
                || endpoint.starts_with("http://[::1]");
            builder = builder.with_endpoint(endpoint).with_allow_http(
                local || std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v == "true"),
            );
        }
        let store = builder.build().map_err(|source| FleetError::Store {
            url: url.to_owned(),
            source,
        })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| FleetError::Local {
                path: PathBuf::from("(a tokio runtime)"),
                source,
            })?;
        Ok(Self {
            url: url.to_owned(),
            store: Arc::new(store),
            prefix: prefix.trim_matches('/').to_owned(),
            wait,
            runtime,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn folder(&self, key: &ProgramKey) -> String {
        if self.prefix.is_empty() {
            key.as_str().to_owned()
        } else {
            format!("{}/{}", self.prefix, key.as_str())
        }
    }

    /// Runs `work` against the store within the wait.
    fn bounded<T>(
        &self,
        work: impl Future<Output = Result<T, object_store::Error>>,
    ) -> Result<T, FleetError> {
        match self
            .runtime
            .block_on(async { tokio::time::timeout(self.wait, work).await })
        {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(source)) => Err(FleetError::Store {
                url: self.url.clone(),
                source,
            }),
            Err(_) => Err(FleetError::TimedOut {
                url: self.url.clone(),
                wait: self.wait,
            }),
        }
    }

    /// Writes the history file at `file` as the program `key`'s latest, from `host`; the
    /// object's key.
    pub fn put(&self, key: &ProgramKey, file: &Path, host: &str) -> Result<String, FleetError> {
        let bytes = std::fs::read(file).map_err(|source| FleetError::Local {
            path: file.to_path_buf(),
            source,
        })?;
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let host: String = host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let name = format!(
            "{}/{millis:013}-{host}-{}.hotpin",
            self.folder(key),
            std::process::id()
        );
        let object = Key::from(name.as_str());
        self.bounded(self.store.put(&object, PutPayload::from(bytes)))?;
        Ok(name)
    }

    /// The program `key`'s histories in the store, oldest first.
    pub fn list(&self, key: &ProgramKey) -> Result<Vec<String>, FleetError> {
        let folder = Key::from(self.folder(key).as_str());
        let mut names: Vec<String> = self
            .bounded(self.store.list(Some(&folder)).try_collect::<Vec<_>>())?
            .into_iter()
            .map(|meta| meta.location.to_string())
            .filter(|name| name.ends_with(".hotpin"))
            .collect();
        names.sort();
        Ok(names)
    }

    /// The program `key`'s latest history, fetched into `cache` (a folder, made if needed)
    /// and checked to be a history; None when the store has none.
    pub fn latest(&self, key: &ProgramKey, cache: &Path) -> Result<Option<PathBuf>, FleetError> {
        Ok(self.latest_runs(key, cache, 1)?.pop())
    }

    /// The program `key`'s `runs` latest histories (fewer if the store has fewer), newest
    /// first, each fetched into `cache` and checked to be a history.
    pub fn latest_runs(
        &self,
        key: &ProgramKey,
        cache: &Path,
        runs: usize,
    ) -> Result<Vec<PathBuf>, FleetError> {
        let names = self.list(key)?;
        let mut paths = Vec::new();
        for name in names.iter().rev().take(runs) {
            paths.push(self.fetch(key, name, cache)?);
        }
        Ok(paths)
    }

    /// Fetches the object `name` (a history of `key`) into `cache`, refusing what is not one.
    fn fetch(&self, key: &ProgramKey, name: &str, cache: &Path) -> Result<PathBuf, FleetError> {
        let object = Key::from(name);
        let bytes = self.bounded(async { self.store.get(&object).await?.bytes().await })?;
        std::fs::create_dir_all(cache).map_err(|source| FleetError::Local {
            path: cache.to_path_buf(),
            source,
        })?;
        let file_name = name.rsplit('/').next().unwrap_or("latest.hotpin");
        let path = cache.join(format!("{}-{file_name}", key.as_str()));
        std::fs::write(&path, &bytes).map_err(|source| FleetError::Local {
            path: path.clone(),
            source,
        })?;
        if let Err(source) = dump::read(&path) {
            let _ = std::fs::remove_file(&path);
            return Err(FleetError::NotAHistory {
                key: name.to_owned(),
                source,
            });
        }
        Ok(path)
    }

    /// Keeps the program `key`'s `keep` latest histories, deleting the older; how many went.
    pub fn retain(&self, key: &ProgramKey, keep: usize) -> Result<usize, FleetError> {
        let names = self.list(key)?;
        let old = names.len().saturating_sub(keep);
        for name in &names[..old] {
            let object = Key::from(name.as_str());
            self.bounded(self.store.delete(&object))?;
        }
        Ok(old)
    }
}

/// This machine's host name, for the objects it writes.
pub fn host_name() -> String {
    hotpin_history::files::host_name().unwrap_or_else(|| "host".to_owned())
}
