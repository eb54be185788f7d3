//! The node's pinned-memory arbiter on a Unix socket (#27): `hotpin run` processes ask it for
//! leases, it grants within the node's budget by `hotpin_lease::arbiter`'s rules and asks
//! less dense holders to give blocks back. Who asks is known from the socket (`SO_PEERCRED`):
//! the pid a client names must be its own, its uid and cgroup select its caps. What a client
//! says it released is checked against the tracer a second later.
//!
//! Each connection is served by its own task: a malformed, oversized or too frequent message
//! is refused to its sender, and the others go on. A client's leases end when its socket
//! closes, or, should a child that inherited the socket keep it open, when its process is
//! gone (checked at every [`LeaseServer::tick`]).

use std::{
    collections::HashMap,
    os::unix::fs::{FileTypeExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hotpin_lease::{
    arbiter::{Arbiter, ClientId, Counters, Limits},
    wire::{self, Framer, Reply, Request, WireError},
};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{UnixListener, UnixStream},
    sync::mpsc,
};

/// A release is checked against the tracer this long after it was said (the tracer's events
/// arrive through a ring buffer, a little later than the client's message), and a block
/// still seen pinned then is checked once more this much later before its client is
/// distrusted: a false accusation stops an honest process from growing.
const CHECK_AFTER: Duration = Duration::from_secs(1);
const CHECK_AGAIN: Duration = Duration::from_secs(2);
/// A lease asked back and not given back within this is said (once).
const RECLAIM_GRACE: Duration = Duration::from_secs(2);
/// Messages one client may send: a burst of this many, then [`REFILL_PER_S`] a second.
const BURST: f64 = 2000.0;
const REFILL_PER_S: f64 = 1000.0;
/// Malformed messages in a row after which a client's connection is closed.
const MALFORMED_IN_A_ROW: u32 = 16;
/// Answers waiting for a client to read them, at most: one that does not read is cut off
/// rather than let the daemon's memory grow.
const OUTBOX: usize = 256;
/// Lease connections open at once, at most: in all (and never more than a quarter of the
/// daemon's open-file limit, which recording needs), and per user (#41 item 7: 20,000 idle
/// connections used up the daemon's files, and another user's CUDA run was not recorded).
/// Root is held to the cap in all only.
const MAX_CONNECTIONS: usize = 4096;
const MAX_PER_USER: usize = 256;

/// The node's figures and each client's, for metrics.
#[derive(Clone, Debug, Default)]
pub struct LeaseFigures {
    pub budget: u64,
    /// Pinned bytes counted against the budget: leases, and pins outside them.
    pub used: u64,
    pub granted: u64,
    pub outside: u64,
    pub counters: Counters,
    /// `(pid, leased bytes)` per connected client.
    pub clients: Vec<(u32, u64)>,
}

/// A release to check against the tracer.
struct Check {
    client: ClientId,
    pid: u32,
    start: u64,
    len: u64,
    due: Instant,
    /// Seen pinned at the first check already.
    again: bool,
}

struct Shared {
    arbiter: Mutex<Arbiter>,
    /// Each connected client's outgoing messages.
    outboxes: Mutex<HashMap<ClientId, mpsc::Sender<Reply>>>,
    checks: Mutex<Vec<Check>>,
    next_id: AtomicU64,
    started: Instant,
    /// Connections open now, by the peer's uid.
    open: Mutex<HashMap<u32, usize>>,
    /// The most connections open at once (a quarter of the open-file limit, at most
    /// [`MAX_CONNECTIONS`]).
    max_open: usize,
    /// Users already told their connections were cut (said once each).
    told: Mutex<std::collections::HashSet<u32>>,
}

/// A connection counted against its user's and the daemon's caps until dropped.
struct Slot {
    shared: Arc<Shared>,
    uid: u32,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self
            .shared
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.uid) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.uid);
            }
        }
    }
}

impl Shared {
    /// A slot for a new connection from `uid`, if neither cap is reached.
    fn slot(self: &Arc<Self>, uid: u32) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let total: usize = open.values().sum();
        let theirs = open.get(&uid).copied().unwrap_or(0);
        // Root may already do anything to the daemon: only the cap in all holds for it.
        if total >= self.max_open || (uid != 0 && theirs >= MAX_PER_USER.min(self.max_open)) {
            return None;
        }
        *open.entry(uid).or_default() += 1;
        Some(Slot {
            shared: Arc::clone(self),
            uid,
        })
    }

    fn arbiter(&self) -> std::sync::MutexGuard<'_, Arbiter> {
        self.arbiter.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn send(&self, client: ClientId, reply: Reply) {
        let outboxes = self.outboxes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(outbox) = outboxes.get(&client) {
            // A full outbox: the reclaim is asked again at the next tick.
            let _ = outbox.try_send(reply);
        }
    }
}

/// The arbiter, bound to its socket.
#[derive(Clone)]
pub struct LeaseServer {
    shared: Arc<Shared>,
    pub path: PathBuf,
}

impl LeaseServer {
    /// Binds `path` (its folder made if missing; a stale socket replaced, one a live daemon
    /// serves refused), readable and writable by every local user: who may ask how much is
    /// the caps' business (docs/leases.md).
    pub fn bind(path: &Path, limits: Limits) -> anyhow::Result<(Self, UnixListener)> {
        use anyhow::Context as _;
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder)
                .with_context(|| format!("cannot make the folder of {}", path.display()))?;
        }
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                anyhow::bail!("{} exists and is not a socket", path.display());
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                anyhow::bail!(
                    "another daemon grants leases at {} (set another with --lease-socket, or off)",
                    path.display()
                );
            }
            std::fs::remove_file(path)
                .with_context(|| format!("cannot replace the stale socket {}", path.display()))?;
        }
        let listener = UnixListener::bind(path)
            .with_context(|| format!("cannot listen on {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
            .with_context(|| format!("cannot open {} to every user", path.display()))?;
        let server = Self {
            shared: Arc::new(Shared {
                arbiter: Mutex::new(Arbiter::new(limits)),
                outboxes: Mutex::new(HashMap::new()),
                checks: Mutex::new(Vec::new()),
                next_id: AtomicU64::new(1),
                started: Instant::now(),
                open: Mutex::new(HashMap::new()),
                max_open: open_file_limit().map_or(MAX_CONNECTIONS, |limit| {
                    (limit / 4).clamp(16, MAX_CONNECTIONS)
                }),
                told: Mutex::new(std::collections::HashSet::new()),
            }),
            path: path.to_owned(),
        };
        Ok((server, listener))
    }

    /// Serves every connection, each in its own task, until the runtime ends.
    pub async fn accept(self, listener: UnixListener) {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let peer = stream.peer_cred().ok();
                    let uid = peer.map_or(u32::MAX, |peer| peer.uid());
                    let Some(slot) = self.shared.slot(uid) else {
                        // Closed at once: past its user's cap, or the daemon's.
                        self.shared.arbiter().counters.refused_messages += 1;
                        if self
                            .shared
                            .told
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(uid)
                        {
                            eprintln!(
                                "tracer daemon: leases: uid {uid} holds {MAX_PER_USER} \
                                 connections (or the daemon {} in all): further ones are closed \
                                 at once, so that recording keeps its files",
                                self.shared.max_open
                            );
                        }
                        drop(stream);
                        continue;
                    };
                    let shared = Arc::clone(&self.shared);
                    tokio::spawn(async move {
                        serve(shared, stream, peer).await;
                        drop(slot);
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot accept a lease connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// A new budget and caps (SIGHUP); leases granted stay.
    pub fn set_limits(&self, limits: Limits) {
        self.shared.arbiter().limits = limits;
    }

    /// What the tracer sees pinned per pid, now; releases due are checked with
    /// `still_pinned(pid, start, len)`; clients whose process is gone lose their leases.
    pub fn tick(&self, pinned: HashMap<u32, u64>, still_pinned: impl Fn(u32, u64, u64) -> bool) {
        let shared = &self.shared;
        let now = Instant::now();
        let due: Vec<Check> = {
            let mut checks = shared.checks.lock().unwrap_or_else(PoisonError::into_inner);
            let (due, later) = checks.drain(..).partition(|c| c.due <= now);
            *checks = later;
            due
        };
        let mut arbiter = shared.arbiter();
        arbiter.observe(pinned);
        let mut recheck = Vec::new();
        for check in due {
            // Leased again since (the block was weighed again and granted): pinned rightly.
            if arbiter.holds(check.client, check.start) {
                continue;
            }
            if !still_pinned(check.pid, check.start, check.len) {
                continue;
            }
            if !check.again {
                recheck.push(Check {
                    due: now + CHECK_AGAIN,
                    again: true,
                    ..check
                });
            } else {
                let why = format!(
                    "released {:#x} ({} bytes), which the tracer still sees pinned",
                    check.start, check.len
                );
                eprintln!(
                    "tracer daemon: leases: pid {} {why}: its asks are refused from now on{}",
                    check.pid,
                    if Path::new(&format!("/proc/{}", check.pid)).exists() {
                        ""
                    } else {
                        " (it has exited since)"
                    }
                );
                arbiter.distrust(check.client, check.start, check.len, why);
            }
        }
        shared
            .checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(recheck);
        let gone: Vec<ClientId> = arbiter
            .clients
            .iter()
            .filter(|(_, c)| !Path::new(&format!("/proc/{}", c.pid)).exists())
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            if let Some(client) = arbiter.disconnect(id) {
                tracing::info!(
                    pid = client.pid,
                    leased = client.leased(),
                    "lease holder gone"
                );
            }
        }
        for (_, pid, why) in arbiter.distrust_deaf(shared.now_ns()) {
            say_distrusted(&format!("pid {pid}"), &why);
        }
        let overdue = arbiter.overdue(shared.now_ns(), RECLAIM_GRACE.as_nanos() as u64);
        drop(arbiter);
        for (client, start) in overdue {
            // Asked again: the first may have crossed a reconnection.
            shared.send(
                client,
                Reply::Reclaim {
                    starts: vec![start],
                },
            );
        }
    }

    /// What the arbiter did for the process `pid` (while connected, or since it left), for
    /// its history; None if it never asked.
    pub fn account_of(&self, pid: u32) -> Option<hotpin_history::history::LeaseAccount> {
        let (tally, distrusted) = self.shared.arbiter().tally_of(pid)?;
        Some(hotpin_history::history::LeaseAccount {
            peak_leased_bytes: tally.peak_leased_bytes,
            granted: tally.granted,
            denied: tally.denied,
            reclaimed: tally.reclaimed,
            reclaimed_bytes: tally.reclaimed_bytes,
            distrusted,
        })
    }

    pub fn figures(&self) -> LeaseFigures {
        let arbiter = self.shared.arbiter();
        LeaseFigures {
            budget: arbiter.limits.node,
            used: arbiter.used(),
            granted: arbiter.granted(),
            outside: arbiter.outside(),
            counters: arbiter.counters,
            clients: arbiter
                .clients
                .values()
                .map(|c| (c.pid, c.leased()))
                .collect(),
        }
    }
}

/// The cgroup (v2) a process is in, "/" when not known.
fn cgroup_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("0::").map(str::to_owned))
        })
        .unwrap_or_else(|| "/".into())
}

/// Says that the client `who` is distrusted for `why` (a claim no lease could make true).
fn say_distrusted(who: &str, why: &str) {
    eprintln!(
        "tracer daemon: leases: {who} {why}: its asks are refused from now on, and only what \
         the tracer sees it pin is counted"
    );
}

/// The soft limit of this process's open files.
fn open_file_limit() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: an out-pointer to a local.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0)
        .then(|| usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX))
}

/// A token bucket: how many messages a client may still send now.
struct Rate {
    tokens: f64,
    at: Instant,
}

impl Rate {
    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * REFILL_PER_S;
        self.tokens = (self.tokens + refill).min(BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One connection, from its first byte to its close.
async fn serve(shared: Arc<Shared>, stream: UnixStream, peer: Option<tokio::net::unix::UCred>) {
    let (mut read, mut write) = stream.into_split();
    let (outbox, mut outgoing) = mpsc::channel::<Reply>(OUTBOX);
    let writer = tokio::spawn(async move {
        while let Some(reply) = outgoing.recv().await {
            let closing = matches!(reply, Reply::Refused { closing: true, .. });
            if write.write_all(&wire::encode(&reply)).await.is_err() || closing {
                break;
            }
        }
        let _ = write.shutdown().await;
    });
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let mut connection = Connection {
        shared: Arc::clone(&shared),
        id,
        peer_pid: peer
            .and_then(|p| p.pid())
            .and_then(|p| u32::try_from(p).ok()),
        peer_uid: peer.map(|p| p.uid()),
        outbox: outbox.clone(),
        deaf: false,
        said_hello: false,
        malformed: 0,
        rate: Rate {
            tokens: BURST,
            at: Instant::now(),
        },
    };
    let mut framer = Framer::default();
    let mut buffer = vec![0u8; 8192];
    'reading: loop {
        match read.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => framer.push(buffer.get(..n).unwrap_or_default()),
        }
        while let Some(line) = framer.next_line() {
            if !connection.take(line) {
                break 'reading;
            }
        }
    }
    if connection.said_hello {
        shared.arbiter().disconnect(id);
        tracing::info!(pid = connection.peer_pid, "lease client disconnected");
    }
    shared
        .outboxes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&id);
    drop(connection);
    drop(outbox);
    // What is left goes out, unless the client does not read: then it is dropped.
    let mut writer = writer;
    if tokio::time::timeout(Duration::from_secs(1), &mut writer)
        .await
        .is_err()
    {
        writer.abort();
    }
}

struct Connection {
    shared: Arc<Shared>,
    id: ClientId,
    peer_pid: Option<u32>,
    peer_uid: Option<u32>,
    outbox: mpsc::Sender<Reply>,
    /// Its answers piled up unread: the connection is closed.
    deaf: bool,
    said_hello: bool,
    malformed: u32,
    rate: Rate,
}

impl Connection {
    fn reply(&mut self, reply: Reply) {
        if self.outbox.try_send(reply).is_err() {
            self.deaf = true;
        }
    }

    fn refuse(&mut self, reason: String, closing: bool) -> bool {
        self.shared.arbiter().counters.refused_messages += 1;
        self.reply(Reply::Refused { reason, closing });
        !closing
    }

    /// Takes one line; false once the connection is to close.
    fn take(&mut self, line: Result<Vec<u8>, WireError>) -> bool {
        let open = self.take_line(line);
        open && !self.deaf
    }

    fn take_line(&mut self, line: Result<Vec<u8>, WireError>) -> bool {
        if !self.rate.take() {
            return self.refuse("too frequent: at most 1000 messages a second".into(), false);
        }
        let request = match line.and_then(|line| wire::decode_request(&line)) {
            Ok(request) => request,
            Err(error) => {
                self.malformed += 1;
                let closing = self.malformed >= MALFORMED_IN_A_ROW;
                return self.refuse(error.to_string(), closing);
            }
        };
        self.malformed = 0;
        match request {
            Request::Hello { pid, .. } => self.hello(pid),
            _ if !self.said_hello => self.refuse("say hello first".into(), true),
            Request::Hold { holding } => {
                let refused = self.shared.arbiter().adopt(self.id, &holding);
                if let Some(why) = refused {
                    let who = format!(
                        "pid {} (uid {})",
                        self.peer_pid.unwrap_or(0),
                        self.peer_uid.unwrap_or(0)
                    );
                    say_distrusted(&who, &why);
                }
                true
            }
            Request::Ask { id, lease } => {
                let now = self.shared.now_ns();
                let verdict = self.shared.arbiter().ask(self.id, lease, now);
                self.reply(match verdict.answer {
                    Ok(()) => Reply::Granted { id },
                    Err(reason) => Reply::Denied { id, reason },
                });
                for (holder, starts) in verdict.reclaim {
                    self.shared.send(holder, Reply::Reclaim { starts });
                }
                true
            }
            Request::Release { starts } => {
                let released = self.shared.arbiter().release(self.id, &starts);
                let pid = self.peer_pid.unwrap_or(0);
                let due = Instant::now() + CHECK_AFTER;
                let mut checks = self
                    .shared
                    .checks
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                // Only the latest release of a block is checked: one released, leased again
                // and released again would otherwise be checked against the second pin.
                checks.retain(|c| {
                    c.client != self.id || !released.iter().any(|&(start, _)| start == c.start)
                });
                checks.extend(released.into_iter().map(|(start, len)| Check {
                    client: self.id,
                    pid,
                    start,
                    len,
                    due,
                    again: false,
                }));
                true
            }
            Request::Scores { scores } => {
                self.shared.arbiter().rescore(self.id, &scores);
                true
            }
        }
    }

    /// The first message: the pid named must be the socket's peer's.
    fn hello(&mut self, pid: u32) -> bool {
        if self.said_hello {
            return self.refuse("hello was said already".into(), false);
        }
        let (Some(peer_pid), Some(uid)) = (self.peer_pid, self.peer_uid) else {
            return self.refuse("the socket does not say who you are".into(), true);
        };
        if pid != peer_pid {
            eprintln!(
                "tracer daemon: leases: a client said it is pid {pid}, the socket says pid \
                 {peer_pid} (uid {uid}): refused"
            );
            self.shared.arbiter().counters.distrusted += 1;
            return self.refuse(
                format!("pid {pid} is not yours (the socket says {peer_pid})"),
                true,
            );
        }
        self.said_hello = true;
        let budget = {
            let mut arbiter = self.shared.arbiter();
            arbiter.connect(self.id, pid, uid, cgroup_of(pid));
            arbiter.limits.node
        };
        self.shared
            .outboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(self.id, self.outbox.clone());
        tracing::info!(pid, uid, "lease client connected");
        self.reply(Reply::Welcome { budget });
        true
    }
}
