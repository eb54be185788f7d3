//! Each history the daemon writes, put in the fleet's store too, by a thread of its own: the
//! store's latency never holds the daemon's writer, and a store that fails is said and
//! counted, not retried.

use std::{
    path::PathBuf,
    sync::mpsc::{Sender, channel},
    thread::JoinHandle,
    time::Duration,
};

use hotpin_fleet::Fleet;
use hotpin_history::store::ProgramKey;

/// What one call to the store may take at most.
const WAIT: Duration = Duration::from_secs(10);

pub struct Uploader {
    queue: Option<Sender<(ProgramKey, PathBuf)>>,
    thread: Option<JoinHandle<(u64, u64)>>,
}

impl Uploader {
    /// Puts histories in the store at `url` under `host`, keeping `keep` of each program.
    pub fn start(url: &str, host: String, keep: usize) -> anyhow::Result<Self> {
        let fleet = Fleet::open(url, WAIT)?;
        let (queue, histories) = channel::<(ProgramKey, PathBuf)>();
        let thread = std::thread::Builder::new()
            .name("fleet".into())
            .spawn(move || {
                let (mut put, mut failed) = (0, 0);
                for (key, path) in histories {
                    match fleet
                        .put(&key, &path, &host)
                        .and_then(|object| fleet.retain(&key, keep).map(|_| object))
                    {
                        Ok(object) => {
                            put += 1;
                            tracing::info!(%object, "history put in the fleet's store");
                        }
                        Err(error) => {
                            failed += 1;
                            tracing::warn!(path = %path.display(), %error, "cannot put a history in the fleet's store");
                        }
                    }
                }
                (put, failed)
            })?;
        Ok(Self {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// Queues the history at `path` of the program `key`.
    pub fn put(&self, key: &ProgramKey, path: PathBuf) {
        if let Some(queue) = &self.queue {
            let _ = queue.send((key.clone(), path));
        }
    }

    /// Waits for the queued histories; how many were put and how many failed.
    pub fn finish(mut self) -> (u64, u64) {
        self.queue = None;
        self.thread
            .take()
            .and_then(|thread| thread.join().ok())
            .unwrap_or((0, 0))
    }
}
