//! Auto mode's side of the node's pinned-memory leases (#27): before pinning a block it
//! decided on, the process asks `tracer daemon`'s arbiter for a lease; it gives blocks back
//! when the arbiter reclaims them, and reports its blocks' current scores each second.
//!
//! - **No daemon** (no socket at the path): the process keeps to its own budget, says so once,
//!   and looks for a daemon again every [`RETRY`]; found, it hands it the leases it holds.
//! - **The daemon dies:** the process keeps its pins, pins nothing new (it stops growing),
//!   and reconnects when a daemon listens again, handing over what it holds.
//! - An answer slower than [`ASK_WAIT`] counts as a denial; a grant that comes after is
//!   released at once.
//!
//! One thread per process reads the daemon's messages; it is marked busy, so what it
//! allocates goes straight to libc. Nothing here is called with the state's lock held, and
//! this module's lock is never held while the state's is taken.

use std::{
    collections::BTreeMap,
    io::{ErrorKind, Read as _, Write as _},
    os::unix::net::UnixStream,
    path::PathBuf,
    sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError},
    time::{Duration, Instant},
};

use hotpin_lease::wire::{self, Denial, Framer, Lease, MAX_BLOCKS, Reply, Request};
use serde::Serialize;

/// How long the pinning thread waits for the arbiter's answer.
const ASK_WAIT: Duration = Duration::from_millis(50);
/// How often a daemon is looked for when there is none.
const RETRY: Duration = Duration::from_millis(500);
/// How often the scores of the blocks held are sent.
const SCORES_EVERY: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Link {
    /// Nothing asked yet.
    #[default]
    NotStarted,
    /// No daemon listens: the process's own budget holds.
    NoDaemon,
    Connected,
    /// It was connected and the daemon went away: pins kept, none added.
    Lost,
}

/// What the report says of the leases.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LeaseCounters {
    pub link: Link,
    /// The socket asked at.
    pub socket: Option<String>,
    /// Why no daemon was found there at first (said on stderr only where the socket was
    /// asked for, or with `HOTPIN_VERBOSE=1`).
    pub no_daemon: Option<String>,
    /// The node's budget, as the daemon said.
    pub node_budget: Option<u64>,
    pub asked: u64,
    pub granted: u64,
    /// Denials by reason, waits past [`ASK_WAIT`] included (`no-answer`), and asks made
    /// while the daemon was gone (`daemon-lost`).
    pub denied: BTreeMap<&'static str, u64>,
    /// Blocks the arbiter asked back, and those given back.
    pub reclaims: u64,
    pub given_back: u64,
    pub reconnects: u64,
    /// The most bytes held in leases at once.
    pub peak_leased_bytes: u64,
}

#[derive(Default)]
struct Inner {
    writer: Option<UnixStream>,
    next_id: u64,
    /// Answers not yet taken, by ask.
    answers: BTreeMap<u64, Result<(), Denial>>,
    /// Asks whose answer came too late: a grant is released at once.
    abandoned: BTreeMap<u64, u64>,
    /// Leases held: start -> (len, score).
    held: BTreeMap<u64, (u64, f64)>,
    reader_started: bool,
    counters: LeaseCounters,
}

impl Inner {
    fn send(&mut self, request: &Request) -> bool {
        let Some(writer) = self.writer.as_mut() else {
            return false;
        };
        if writer.write_all(&wire::encode(request)).is_ok() {
            return true;
        }
        self.writer = None;
        self.counters.link = Link::Lost;
        false
    }

    fn deny(&mut self, why: &'static str) -> bool {
        *self.counters.denied.entry(why).or_default() += 1;
        false
    }

    fn leased(&self) -> u64 {
        self.held.values().map(|(len, _)| len).sum()
    }
}

static INNER: Mutex<Option<Inner>> = Mutex::new(None);
static ANSWERED: Condvar = Condvar::new();
/// The socket, and whether its absence is to be said; None when leases are off (not auto
/// mode, or `HOTPIN_LEASE_SOCKET=off`).
static SOCKET: OnceLock<Option<(PathBuf, bool)>> = OnceLock::new();

fn lock() -> MutexGuard<'static, Option<Inner>> {
    INNER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Leases are asked for at `socket` (auto mode), or not at all; with `say`, a socket with no
/// daemon is said once (it is always in the report).
pub fn configure(socket: Option<(PathBuf, bool)>) {
    let _ = SOCKET.set(socket);
}

/// How the client answers the arbiter (`learning`, which holds the leased blocks), given at
/// load.
pub fn answer_with(answers: Answers) {
    let _ = ANSWERS.set(answers);
}

/// What the client asks of the blocks it leased when the arbiter speaks: given by
/// `learning`, which holds them, so that this file needs nothing of it.
pub struct Answers {
    /// Lets go of the blocks at these starts (a reclaim); how many it let go.
    pub give_back: fn(&[u64]) -> usize,
    /// Each block's score now (net saving per pinned byte), for the arbiter's reclaims.
    pub lease_scores: fn(&[u64]) -> Vec<(u64, f64)>,
}

static ANSWERS: OnceLock<Answers> = OnceLock::new();

/// Whether `start..start+len` (of score `score`) may be pinned: granted, or no daemon to ask
/// (the process's own budget then decides alone).
pub fn ask(start: usize, len: usize, score: f64) -> bool {
    let Some(Some((path, say))) = SOCKET.get() else {
        return true;
    };
    let mut guard = lock();
    let inner = guard.get_or_insert_with(Inner::default);
    if !inner.reader_started {
        inner.reader_started = true;
        inner.counters.socket = Some(path.display().to_string());
        connect(inner, path, false, *say);
        let path = path.clone();
        if std::thread::Builder::new()
            .name("hotpin-lease".into())
            .spawn(move || {
                crate::signals::block_all_on_this_thread();
                read_forever(path);
            })
            .is_err()
        {
            eprintln!("hotpin: cannot start the lease thread; keeping to this process's budget");
            inner.writer = None;
            inner.counters.link = Link::NoDaemon;
        }
    }
    inner.counters.asked += 1;
    match inner.counters.link {
        Link::NoDaemon | Link::NotStarted => return true,
        Link::Lost => return inner.deny("daemon-lost"),
        Link::Connected => {}
    }
    let id = inner.next_id;
    inner.next_id += 1;
    let request = Request::Ask {
        id,
        lease: Lease {
            start: start as u64,
            len: len as u64,
            score: if score.is_finite() {
                score.max(0.0)
            } else {
                0.0
            },
        },
    };
    if !inner.send(&request) {
        return inner.deny("daemon-lost");
    }
    let asked = Instant::now();
    loop {
        let Some(inner) = guard.as_mut() else {
            return false;
        };
        if let Some(answer) = inner.answers.remove(&id) {
            return match answer {
                Ok(()) => {
                    inner.counters.granted += 1;
                    inner.held.insert(start as u64, (len as u64, score));
                    let leased = inner.leased();
                    inner.counters.peak_leased_bytes = inner.counters.peak_leased_bytes.max(leased);
                    true
                }
                Err(reason) => inner.deny(reason.as_str()),
            };
        }
        let left = ASK_WAIT.saturating_sub(asked.elapsed());
        if left.is_zero() || inner.counters.link != Link::Connected {
            inner.abandoned.insert(id, start as u64);
            return inner.deny("no-answer");
        }
        guard = ANSWERED
            .wait_timeout(guard, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// The block at `start` was unregistered: its lease, if it had one, ends.
pub fn released(start: usize) {
    let mut guard = lock();
    let Some(inner) = guard.as_mut() else { return };
    if inner.held.remove(&(start as u64)).is_some() {
        inner.send(&Request::Release {
            starts: vec![start as u64],
        });
    }
}

/// What the report says.
pub fn counters() -> Option<LeaseCounters> {
    lock().as_ref().map(|inner| inner.counters.clone())
}

/// Connects (again) and says hello, then hands over the leases held. Where no daemon listens
/// it is recorded for the report, and said with `say` (only the first call says).
fn connect(inner: &mut Inner, path: &PathBuf, again: bool, say: bool) -> Option<UnixStream> {
    let stream = match UnixStream::connect(path) {
        Ok(stream) => stream,
        Err(error) => {
            if inner.counters.link == Link::NotStarted {
                inner.counters.link = Link::NoDaemon;
                inner.counters.no_daemon = Some(error.to_string());
            }
            if say {
                eprintln!(
                    "hotpin: no node arbiter at {} ({error}): keeping to this process's own \
                     pinned budget",
                    path.display()
                );
            }
            return None;
        }
    };
    let _ = stream.set_write_timeout(Some(ASK_WAIT));
    let reader = stream.try_clone().ok()?;
    inner.writer = Some(stream);
    let was = std::mem::replace(&mut inner.counters.link, Link::Connected);
    let mut ok = inner.send(&Request::Hello {
        version: wire::VERSION,
        pid: std::process::id(),
    });
    let holding: Vec<Lease> = inner
        .held
        .iter()
        .map(|(&start, &(len, score))| Lease { start, len, score })
        .collect();
    for chunk in holding.chunks(MAX_BLOCKS) {
        ok &= inner.send(&Request::Hold {
            holding: chunk.to_vec(),
        });
    }
    if !ok {
        inner.counters.link = was;
        return None;
    }
    if again {
        inner.counters.reconnects += 1;
        eprintln!(
            "hotpin: connected to the node arbiter at {} ({} blocks held handed over)",
            path.display(),
            holding.len()
        );
    }
    Some(reader)
}

/// The lease thread: reads the daemon's messages, sends scores, and reconnects.
fn read_forever(path: PathBuf) {
    let _busy = crate::guard::Busy::enter();
    let mut reader = lock()
        .as_mut()
        .and_then(|inner| inner.writer.as_ref().and_then(|w| w.try_clone().ok()));
    let mut last_scores = Instant::now();
    let mut framer = Framer::default();
    loop {
        let Some(stream) = reader.as_mut() else {
            std::thread::sleep(RETRY);
            reader = lock()
                .as_mut()
                .and_then(|inner| connect(inner, &path, true, false));
            framer = Framer::default();
            continue;
        };
        if !read_some(stream, &mut framer) {
            let mut guard = lock();
            if let Some(inner) = guard.as_mut() {
                inner.writer = None;
                if inner.counters.link == Link::Connected {
                    inner.counters.link = Link::Lost;
                    eprintln!(
                        "hotpin: the node arbiter went away: keeping the pins held, pinning \
                         nothing new until it is back"
                    );
                }
            }
            drop(guard);
            ANSWERED.notify_all();
            reader = None;
            continue;
        }
        if last_scores.elapsed() >= SCORES_EVERY {
            last_scores = Instant::now();
            send_scores();
        }
    }
}

/// Reads and handles what the daemon sent within a second (a line cut by the read's end
/// waits in `framer` for the rest); false once the connection is gone.
fn read_some(stream: &mut UnixStream, framer: &mut Framer) -> bool {
    let _ = stream.set_read_timeout(Some(SCORES_EVERY));
    let mut buffer = [0u8; 4096];
    match stream.read(&mut buffer) {
        Ok(0) => return false,
        Ok(n) => framer.push(buffer.get(..n).unwrap_or_default()),
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
            ) =>
        {
            return true;
        }
        Err(_) => return false,
    }
    while let Some(line) = framer.next_line() {
        if let Ok(line) = line
            && let Ok(reply) = wire::decode_reply(&line)
        {
            handle(reply);
        }
    }
    true
}

fn handle(reply: Reply) {
    match reply {
        Reply::Welcome { budget } => {
            if let Some(inner) = lock().as_mut() {
                inner.counters.node_budget = Some(budget);
            }
        }
        Reply::Granted { id } => answered(id, Ok(())),
        Reply::Denied { id, reason } => answered(id, Err(reason)),
        Reply::Reclaim { starts } => {
            if let Some(inner) = lock().as_mut() {
                inner.counters.reclaims += starts.len() as u64;
            }
            let given = ANSWERS
                .get()
                .map_or(0, |answers| (answers.give_back)(&starts));
            if let Some(inner) = lock().as_mut() {
                inner.counters.given_back += given as u64;
            }
        }
        Reply::Refused { reason, closing } => {
            eprintln!(
                "hotpin: the node arbiter refused a message: {reason}{}",
                if closing {
                    " (it closed the connection)"
                } else {
                    ""
                }
            );
        }
    }
}

fn answered(id: u64, answer: Result<(), Denial>) {
    let mut guard = lock();
    let Some(inner) = guard.as_mut() else { return };
    if let Some(start) = inner.abandoned.remove(&id) {
        if answer.is_ok() {
            inner.send(&Request::Release {
                starts: vec![start],
            });
        }
        return;
    }
    inner.answers.insert(id, answer);
    drop(guard);
    ANSWERED.notify_all();
}

/// Sends the current score of every block held.
fn send_scores() {
    let starts: Vec<u64> = match lock().as_ref() {
        Some(inner) if inner.counters.link == Link::Connected => {
            inner.held.keys().copied().collect()
        }
        _ => return,
    };
    if starts.is_empty() {
        return;
    }
    let scores = ANSWERS
        .get()
        .map_or_else(Vec::new, |answers| (answers.lease_scores)(&starts));
    let mut guard = lock();
    let Some(inner) = guard.as_mut() else { return };
    for (start, score) in &scores {
        if let Some(held) = inner.held.get_mut(start) {
            held.1 = *score;
        }
    }
    for chunk in scores.chunks(MAX_BLOCKS) {
        inner.send(&Request::Scores {
            scores: chunk.to_vec(),
        });
    }
}
