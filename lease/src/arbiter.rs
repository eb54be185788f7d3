//! The daemon's rules for the node's pinned memory, apart from any socket: which leases are
//! granted, whose blocks are reclaimed for a denser one, and what the node has pinned.
//!
//! - **What counts.** Per process, the larger of what its leases hold and what the tracer
//!   saw it pin (its own `cudaHostAlloc`s and registrations, hotpin's included), plus every
//!   pin the tracer saw of processes that hold no lease. A pin made outside hotpin takes
//!   from the budget as a lease does; a client that pins more than it leased is counted at
//!   what it pinned.
//! - **Grants.** A lease is granted when it fits the node's budget (less what is reserved
//!   for others) and the caps of its user and cgroup.
//! - **Reclaim.** When it does not fit, the leases of other clients that are
//!   [`HYSTERESIS`] times less dense are asked back, least dense first, if together they
//!   make room; the room is reserved for the asker for [`RESERVE_NS`], and the asker told
//!   to ask again. Nothing flaps: a block is never displaced by one barely denser.
//! - **Trust.** A client's release is checked against the tracer (by the daemon, after a
//!   grace); one found still pinned marks the client distrusted: its asks are refused. So
//!   is a client that says it holds (`hold`, after a restart) more than the node's budget or
//!   its user's cap, and one that keeps a lease asked back for [`DEAF_NS`] (#41 item 6: a
//!   `hold` of 256 GiB against 6 GiB had every other ask answered `reclaiming` for as long as
//!   its client stayed). A distrusted client's leases count only as far as the tracer sees
//!   its process pin, and are never asked back again.

use std::collections::{BTreeMap, HashMap};

use crate::wire::{Denial, Lease};

/// A candidate must be this many times denser than each lease reclaimed for it.
pub const HYSTERESIS: f64 = 2.0;
/// How long room reclaimed for an asker is kept for it.
pub const RESERVE_NS: u64 = 2_000_000_000;
/// A client that keeps a lease this long after it was asked back is distrusted.
pub const DEAF_NS: u64 = 5_000_000_000;

/// A connection's number, given by the daemon.
pub type ClientId = u64;

/// The budget and the caps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Limits {
    /// The node's pinned-memory budget, in bytes.
    pub node: u64,
    /// Caps on what the clients of one user may lease, by uid.
    pub per_user: HashMap<u32, u64>,
    /// Caps on what the clients in one cgroup (the path, or a parent of it) may lease.
    pub per_cgroup: Vec<(String, u64)>,
}

/// One block a client holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Held {
    pub len: u64,
    pub score: f64,
    /// Asked back since (ns), not given back yet.
    pub reclaimed_at: Option<u64>,
}

/// A connected client.
#[derive(Clone, Debug, Default)]
pub struct Client {
    pub pid: u32,
    pub uid: u32,
    /// Its cgroup (v2 path, "/" when not known).
    pub cgroup: String,
    pub leases: BTreeMap<u64, Held>,
    /// Why it is no longer trusted, if it is not.
    pub distrusted: Option<String>,
    /// What the arbiter did for it so far.
    pub tally: Tally,
}

/// What the arbiter did for one client over its life: written into its process's history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// The most bytes leased to it at once.
    pub peak_leased_bytes: u64,
    pub granted: u64,
    pub denied: u64,
    /// Blocks it was asked to give back, and their bytes.
    pub reclaimed: u64,
    pub reclaimed_bytes: u64,
}

impl Held {
    fn new(len: u64, score: f64) -> Self {
        Self {
            len,
            score,
            reclaimed_at: None,
        }
    }
}

impl Client {
    pub fn leased(&self) -> u64 {
        self.leases.values().map(|h| h.len).sum()
    }
}

/// Room reclaimed for an asker.
#[derive(Clone, Copy, Debug)]
struct Reservation {
    client: ClientId,
    bytes: u64,
    until_ns: u64,
}

/// The node's figures, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub granted: u64,
    pub denied: u64,
    pub reclaims: u64,
    pub reclaimed_bytes: u64,
    pub distrusted: u64,
    pub refused_messages: u64,
}

/// The answer to an ask, and the reclaims it starts: `(holder, starts)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub answer: Result<(), Denial>,
    pub reclaim: Vec<(ClientId, Vec<u64>)>,
}

#[derive(Debug, Default)]
pub struct Arbiter {
    pub limits: Limits,
    pub clients: BTreeMap<ClientId, Client>,
    /// Pinned bytes the tracer sees per pid (every process it traces).
    observed: HashMap<u32, u64>,
    reserved: Vec<Reservation>,
    pub counters: Counters,
    /// Clients gone, latest last, at most [`MAX_ENDED`]: their process's history is written
    /// after they leave.
    ended: std::collections::VecDeque<Ended>,
}

/// What is kept of a client gone, for its process's history.
#[derive(Clone, Copy, Debug)]
struct Ended {
    pid: u32,
    tally: Tally,
    distrusted: bool,
}

/// How many clients gone are remembered.
pub const MAX_ENDED: usize = 4096;

impl Arbiter {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    pub fn connect(&mut self, id: ClientId, pid: u32, uid: u32, cgroup: String) {
        self.clients.insert(
            id,
            Client {
                pid,
                uid,
                cgroup,
                ..Client::default()
            },
        );
    }

    /// The leases a client held before it connected (the daemon restarted): taken as held,
    /// they are real pins whether granted or not; unless, with what it holds already, they
    /// pass the node's budget or its user's cap, which no lease could: then none is taken,
    /// and the client is distrusted (returned: why).
    pub fn adopt(&mut self, id: ClientId, holding: &[Lease]) -> Option<String> {
        let claimed = holding
            .iter()
            .fold(0u64, |sum, lease| sum.saturating_add(lease.len));
        let client = self.clients.get(&id)?;
        let total = client.leased().saturating_add(claimed);
        let cap = self
            .limits
            .per_user
            .get(&client.uid)
            .copied()
            .unwrap_or(u64::MAX)
            .min(self.limits.node);
        if total > cap {
            let why = format!(
                "said it holds {total} bytes of leases, more than the {cap} bytes it could \
                 ever be leased"
            );
            self.mark_distrusted(id, why.clone());
            return Some(why);
        }
        let client = self.clients.get_mut(&id)?;
        for lease in holding {
            client
                .leases
                .insert(lease.start, Held::new(lease.len, lease.score));
        }
        client.tally.peak_leased_bytes = client.tally.peak_leased_bytes.max(client.leased());
        None
    }

    fn mark_distrusted(&mut self, id: ClientId, why: String) {
        if let Some(client) = self.clients.get_mut(&id) {
            if client.distrusted.is_none() {
                self.counters.distrusted += 1;
            }
            client.distrusted = Some(why);
        }
        self.reserved.retain(|r| r.client != id);
    }

    /// Clients that kept a lease asked back more than [`DEAF_NS`] ago: distrusted now.
    /// Returns each newly distrusted one, its pid and why.
    pub fn distrust_deaf(&mut self, now_ns: u64) -> Vec<(ClientId, u32, String)> {
        let deaf: Vec<(ClientId, u32, u64, u64)> = self
            .clients
            .iter()
            .filter(|(_, client)| client.distrusted.is_none())
            .filter_map(|(&id, client)| {
                let kept: Vec<&Held> = client
                    .leases
                    .values()
                    .filter(|held| {
                        held.reclaimed_at
                            .is_some_and(|at| now_ns.saturating_sub(at) > DEAF_NS)
                    })
                    .collect();
                (!kept.is_empty()).then(|| {
                    (
                        id,
                        client.pid,
                        kept.len() as u64,
                        kept.iter().map(|h| h.len).sum(),
                    )
                })
            })
            .collect();
        deaf.into_iter()
            .map(|(id, pid, blocks, bytes)| {
                let why = format!(
                    "kept {blocks} leases ({bytes} bytes) asked back more than {} s ago",
                    DEAF_NS / 1_000_000_000
                );
                self.mark_distrusted(id, why.clone());
                (id, pid, why)
            })
            .collect()
    }

    /// A client gone: its leases end, its reservations too.
    pub fn disconnect(&mut self, id: ClientId) -> Option<Client> {
        self.reserved.retain(|r| r.client != id);
        let client = self.clients.remove(&id)?;
        if self.ended.len() == MAX_ENDED {
            self.ended.pop_front();
        }
        self.ended.push_back(Ended {
            pid: client.pid,
            tally: client.tally,
            distrusted: client.distrusted.is_some(),
        });
        Some(client)
    }

    /// What the arbiter did for the process `pid` (its connections now and gone, together),
    /// and whether it was distrusted; None if it never asked.
    pub fn tally_of(&self, pid: u32) -> Option<(Tally, bool)> {
        let live = self
            .clients
            .values()
            .filter(|c| c.pid == pid)
            .map(|c| (c.tally, c.distrusted.is_some()));
        let gone = self
            .ended
            .iter()
            .filter(|e| e.pid == pid)
            .map(|e| (e.tally, e.distrusted));
        live.chain(gone).reduce(|(a, a_lied), (b, b_lied)| {
            (
                Tally {
                    peak_leased_bytes: a.peak_leased_bytes.max(b.peak_leased_bytes),
                    granted: a.granted + b.granted,
                    denied: a.denied + b.denied,
                    reclaimed: a.reclaimed + b.reclaimed,
                    reclaimed_bytes: a.reclaimed_bytes + b.reclaimed_bytes,
                },
                a_lied || b_lied,
            )
        })
    }

    /// What the tracer sees pinned, per pid, now.
    pub fn observe(&mut self, pinned: HashMap<u32, u64>) {
        self.observed = pinned;
    }

    /// Bytes leased to clients.
    pub fn granted(&self) -> u64 {
        self.clients.values().map(Client::leased).sum()
    }

    /// The node's pinned bytes as counted against the budget (see the module's notes).
    pub fn used(&self) -> u64 {
        let mut leased: HashMap<u32, u64> = HashMap::new();
        for client in self.clients.values() {
            // A distrusted client's word is not taken: its process counts at what the tracer
            // sees it pin.
            let word = if client.distrusted.is_some() {
                0
            } else {
                client.leased()
            };
            *leased.entry(client.pid).or_default() += word;
        }
        let mut used = 0;
        for (pid, &bytes) in &leased {
            used += bytes.max(self.observed.get(pid).copied().unwrap_or(0));
        }
        for (pid, &bytes) in &self.observed {
            if !leased.contains_key(pid) {
                used += bytes;
            }
        }
        used
    }

    /// Pinned bytes not covered by a lease: programs' own pins, and processes not under
    /// hotpin.
    pub fn outside(&self) -> u64 {
        self.used().saturating_sub(self.granted())
    }

    /// A lease for `lease` asked by client `id` at `now_ns`.
    pub fn ask(&mut self, id: ClientId, lease: Lease, now_ns: u64) -> Verdict {
        let verdict = self.judge(id, lease, now_ns);
        if verdict.answer.is_ok() {
            self.counters.granted += 1;
            if let Some(client) = self.clients.get_mut(&id) {
                client
                    .leases
                    .insert(lease.start, Held::new(lease.len, lease.score));
                client.tally.granted += 1;
                client.tally.peak_leased_bytes =
                    client.tally.peak_leased_bytes.max(client.leased());
            }
            // What was reserved for it is taken.
            self.reserved.retain(|r| r.client != id);
        } else {
            self.counters.denied += 1;
            if let Some(client) = self.clients.get_mut(&id) {
                client.tally.denied += 1;
            }
        }
        verdict
    }

    fn judge(&mut self, id: ClientId, lease: Lease, now_ns: u64) -> Verdict {
        let deny = |reason| Verdict {
            answer: Err(reason),
            reclaim: Vec::new(),
        };
        let Some(client) = self.clients.get(&id) else {
            return deny(Denial::Distrusted);
        };
        if client.distrusted.is_some() {
            return deny(Denial::Distrusted);
        }
        if let Some(denial) = self.over_a_cap(client, lease.len) {
            return deny(denial);
        }
        if lease.len > self.limits.node {
            return deny(Denial::TooLarge);
        }
        self.reserved.retain(|r| r.until_ns > now_ns);
        let others_reserved: u64 = self
            .reserved
            .iter()
            .filter(|r| r.client != id)
            .map(|r| r.bytes)
            .sum();
        let used = self.used() + others_reserved;
        if used + lease.len <= self.limits.node {
            return Verdict {
                answer: Ok(()),
                reclaim: Vec::new(),
            };
        }
        let shortfall = used + lease.len - self.limits.node;
        match self.choose_reclaims(id, lease.score, shortfall, now_ns) {
            Some(reclaim) => {
                self.reserved.retain(|r| r.client != id);
                self.reserved.push(Reservation {
                    client: id,
                    bytes: lease.len,
                    until_ns: now_ns + RESERVE_NS,
                });
                Verdict {
                    answer: Err(Denial::Reclaiming),
                    reclaim,
                }
            }
            None => deny(Denial::NodeBudget),
        }
    }

    /// The cap the lease would pass, if any: its user's, or its cgroup's (the longest
    /// configured path that holds the client's).
    fn over_a_cap(&self, client: &Client, len: u64) -> Option<Denial> {
        if let Some(&cap) = self.limits.per_user.get(&client.uid) {
            let held: u64 = self
                .clients
                .values()
                .filter(|c| c.uid == client.uid)
                .map(Client::leased)
                .sum();
            if held + len > cap {
                return Some(if len > cap {
                    Denial::TooLarge
                } else {
                    Denial::UserCap
                });
            }
        }
        let (prefix, cap) = self
            .limits
            .per_cgroup
            .iter()
            .filter(|(path, _)| in_cgroup(&client.cgroup, path))
            .max_by_key(|(path, _)| path.len())?;
        let held: u64 = self
            .clients
            .values()
            .filter(|c| in_cgroup(&c.cgroup, prefix))
            .map(Client::leased)
            .sum();
        (held + len > *cap).then_some(Denial::CgroupCap)
    }

    /// Leases of other clients, least dense first, that together free `shortfall` bytes
    /// (those asked back already count), each [`HYSTERESIS`] times less dense than `score`;
    /// marked asked back. None if they cannot make room.
    fn choose_reclaims(
        &mut self,
        asker: ClientId,
        score: f64,
        shortfall: u64,
        now_ns: u64,
    ) -> Option<Vec<(ClientId, Vec<u64>)>> {
        let mut freed: u64 = 0;
        let mut candidates = Vec::new();
        for (&id, client) in &self.clients {
            // A distrusted client's leases are not counted, so not asked back either.
            if id == asker || client.distrusted.is_some() {
                continue;
            }
            for (&start, held) in &client.leases {
                if held.reclaimed_at.is_some() {
                    freed += held.len;
                } else if held.score * HYSTERESIS < score {
                    candidates.push((held.score, id, start, held.len));
                }
            }
        }
        candidates.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut chosen: BTreeMap<ClientId, Vec<u64>> = BTreeMap::new();
        for (_, id, start, len) in candidates {
            if freed >= shortfall {
                break;
            }
            freed += len;
            chosen.entry(id).or_default().push(start);
        }
        if freed < shortfall {
            return None;
        }
        for (id, starts) in &chosen {
            if let Some(client) = self.clients.get_mut(id) {
                for start in starts {
                    if let Some(held) = client.leases.get_mut(start) {
                        held.reclaimed_at = Some(now_ns);
                        self.counters.reclaims += 1;
                        self.counters.reclaimed_bytes += held.len;
                        client.tally.reclaimed += 1;
                        client.tally.reclaimed_bytes += held.len;
                    }
                }
            }
        }
        Some(chosen.into_iter().collect())
    }

    /// A client released `starts`: their leases end. Returns the blocks released,
    /// `(start, len)`, for the daemon to check against the tracer.
    pub fn release(&mut self, id: ClientId, starts: &[u64]) -> Vec<(u64, u64)> {
        let Some(client) = self.clients.get_mut(&id) else {
            return Vec::new();
        };
        starts
            .iter()
            .filter_map(|start| client.leases.remove(start).map(|h| (*start, h.len)))
            .collect()
    }

    /// Whether client `id` holds a lease on the block at `start` (granted again since it was
    /// released, say: then the tracer seeing it pinned is no lie).
    pub fn holds(&self, id: ClientId, start: u64) -> bool {
        self.clients
            .get(&id)
            .is_some_and(|client| client.leases.contains_key(&start))
    }

    /// New scores for blocks a client holds.
    pub fn rescore(&mut self, id: ClientId, scores: &[(u64, f64)]) {
        if let Some(client) = self.clients.get_mut(&id) {
            for (start, score) in scores {
                if let Some(held) = client.leases.get_mut(start) {
                    held.score = *score;
                }
            }
        }
    }

    /// The tracer saw client `id` keep pinned a block it said it released: its asks are
    /// refused from now on, and the block counts as leased again.
    pub fn distrust(&mut self, id: ClientId, start: u64, len: u64, why: String) {
        if let Some(client) = self.clients.get_mut(&id) {
            client.leases.insert(start, Held::new(len, 0.0));
        }
        self.mark_distrusted(id, why);
    }

    /// Leases asked back more than `grace_ns` ago and not given back, `(client, start)`; a
    /// distrusted client's are not asked again.
    pub fn overdue(&self, now_ns: u64, grace_ns: u64) -> Vec<(ClientId, u64)> {
        self.clients
            .iter()
            .filter(|(_, client)| client.distrusted.is_none())
            .flat_map(|(&id, client)| {
                client.leases.iter().filter_map(move |(&start, held)| {
                    held.reclaimed_at
                        .filter(|&at| now_ns.saturating_sub(at) > grace_ns)
                        .map(|_| (id, start))
                })
            })
            .collect()
    }
}

/// Whether cgroup `path` is `prefix` or inside it.
fn in_cgroup(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path == prefix
        || prefix.is_empty()
        || path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn lease(start: u64, mib: u64, score: f64) -> Lease {
        Lease {
            start,
            len: mib * MIB,
            score,
        }
    }

    fn arbiter(node_mib: u64) -> Arbiter {
        let mut arbiter = Arbiter::new(Limits {
            node: node_mib * MIB,
            ..Limits::default()
        });
        arbiter.connect(1, 100, 1000, "/user.slice/a".into());
        arbiter.connect(2, 200, 1000, "/user.slice/b".into());
        arbiter
    }

    #[test]
    fn a_hold_past_the_budget_is_not_taken_and_its_client_distrusted() {
        let mut a = arbiter(100);
        // 256 GiB said held against a 100 MiB budget.
        let why = a.adopt(2, &[lease(0, 256 << 10, 1.0)]);
        assert!(why.is_some_and(|w| w.contains("more than")));
        assert_eq!(a.used(), 0, "nothing of it counted");
        assert_eq!(
            a.ask(2, lease(0, 10, 9.0), 0).answer,
            Err(Denial::Distrusted)
        );
        assert_eq!(
            a.ask(1, lease(0, 60, 1.0), 0).answer,
            Ok(()),
            "others are granted"
        );
        // A hold within the budget is taken as held.
        a.connect(3, 300, 1000, "/".into());
        assert_eq!(a.adopt(3, &[lease(1 << 30, 30, 1.0)]), None);
        assert_eq!(a.used(), 90 * MIB);
        assert_eq!(a.counters.distrusted, 1);
    }

    #[test]
    fn a_client_deaf_to_reclaims_is_distrusted_and_its_word_no_longer_counts() {
        let mut a = arbiter(100);
        assert!(a.ask(2, lease(0, 90, 0.1), 0).answer.is_ok());
        let verdict = a.ask(1, lease(0, 50, 5.0), 10);
        assert_eq!(verdict.answer, Err(Denial::Reclaiming));
        assert!(a.distrust_deaf(DEAF_NS).is_empty(), "not yet");
        let deaf = a.distrust_deaf(DEAF_NS + 20);
        assert_eq!(deaf.len(), 1, "{deaf:?}");
        assert_eq!(deaf[0].1, 200);
        assert!(a.overdue(DEAF_NS + 20, 0).is_empty(), "never asked again");
        // Its process pins nothing the tracer sees: the room is there.
        assert_eq!(a.used(), 0);
        assert_eq!(a.ask(1, lease(0, 50, 5.0), DEAF_NS + 30).answer, Ok(()));
        // Pins the tracer sees it make still count.
        a.observe(HashMap::from([(200, 40 * MIB)]));
        assert_eq!(a.used(), 90 * MIB);
        assert_eq!(
            a.ask(1, lease(1 << 30, 20, 5.0), DEAF_NS + 40).answer,
            Err(Denial::NodeBudget)
        );
    }

    #[test]
    fn leases_are_granted_within_the_budget_and_pins_outside_hotpin_count() {
        let mut a = arbiter(100);
        assert_eq!(a.ask(1, lease(0, 40, 1.0), 0).answer, Ok(()));
        assert_eq!(a.ask(2, lease(0, 40, 1.0), 0).answer, Ok(()));
        assert_eq!(a.used(), 80 * MIB);
        // A process not under hotpin pinned 30 MiB: the next 20 do not fit.
        a.observe(HashMap::from([(300, 30 * MIB)]));
        assert_eq!(a.outside(), 30 * MIB);
        assert_eq!(
            a.ask(1, lease(1 << 30, 20, 1.5), 0).answer,
            Err(Denial::NodeBudget),
            "not twice as dense as what it would displace"
        );
        // A client that pinned more than it leased counts at what it pinned.
        a.observe(HashMap::from([(100, 70 * MIB)]));
        assert_eq!(a.used(), 110 * MIB);
        assert_eq!(a.granted(), 80 * MIB);
        assert_eq!(a.outside(), 30 * MIB);
    }

    #[test]
    fn a_denser_block_reclaims_the_least_dense_and_the_room_is_kept_for_it() {
        let mut a = arbiter(100);
        assert!(a.ask(2, lease(0, 40, 1.0), 0).answer.is_ok());
        assert!(a.ask(2, lease(1 << 30, 40, 0.1), 0).answer.is_ok());
        let verdict = a.ask(1, lease(0, 50, 5.0), 10);
        assert_eq!(verdict.answer, Err(Denial::Reclaiming));
        // 30 MiB short: the least dense (0.1) alone frees 40.
        assert_eq!(verdict.reclaim, vec![(2, vec![1 << 30])]);
        assert_eq!(a.counters.reclaims, 1);
        // Asked again before the holder gave it back: nothing more is reclaimed.
        let again = a.ask(1, lease(0, 50, 5.0), 20);
        assert_eq!(again.answer, Err(Denial::Reclaiming));
        assert!(again.reclaim.is_empty(), "{again:?}");
        // Given back: the room is the asker's, not a third client's.
        assert_eq!(a.release(2, &[1 << 30]), vec![(1 << 30, 40 * MIB)]);
        a.connect(3, 300, 1000, "/".into());
        assert_eq!(
            a.ask(3, lease(0, 30, 1.5), 30).answer,
            Err(Denial::NodeBudget),
            "the room is reserved, and what is held not half as dense"
        );
        assert_eq!(a.ask(1, lease(0, 50, 5.0), 40).answer, Ok(()));
        assert!(a.used() <= 100 * MIB);
        // What each was given, denied and asked back, for its history, kept after it left.
        a.disconnect(2);
        assert_eq!(a.tally_of(200).map(|(t, _)| t.reclaimed), Some(1));
        assert_eq!(a.tally_of(999), None);
        assert_eq!(
            a.clients[&1].tally,
            Tally {
                peak_leased_bytes: 50 * MIB,
                granted: 1,
                denied: 2,
                reclaimed: 0,
                reclaimed_bytes: 0
            }
        );
        assert_eq!(
            a.tally_of(200).expect("gone, remembered").0,
            Tally {
                peak_leased_bytes: 80 * MIB,
                granted: 2,
                denied: 0,
                reclaimed: 1,
                reclaimed_bytes: 40 * MIB
            }
        );
        // Once the reservation expired, the room left goes to whoever asks.
        a.release(1, &[0]);
        assert_eq!(a.ask(3, lease(0, 30, 0.5), 40 + RESERVE_NS).answer, Ok(()));
    }

    #[test]
    fn nothing_flaps_between_two_blocks_of_like_density() {
        let mut a = arbiter(50);
        assert!(a.ask(1, lease(0, 40, 1.0), 0).answer.is_ok());
        for t in 1..100 {
            let verdict = a.ask(2, lease(0, 40, 1.9), t);
            assert_eq!(verdict.answer, Err(Denial::NodeBudget));
            assert!(verdict.reclaim.is_empty());
        }
        assert_eq!(a.counters.reclaims, 0);
    }

    #[test]
    fn caps_of_a_user_and_of_a_cgroup_hold() {
        let mut a = Arbiter::new(Limits {
            node: 1000 * MIB,
            per_user: HashMap::from([(1000, 50 * MIB)]),
            per_cgroup: vec![("/kubepods/pod-a".into(), 20 * MIB)],
        });
        a.connect(1, 100, 1000, "/user.slice".into());
        a.connect(2, 200, 1000, "/user.slice".into());
        a.connect(3, 300, 0, "/kubepods/pod-a/c1".into());
        a.connect(4, 400, 0, "/kubepods/pod-ab".into());
        assert!(a.ask(1, lease(0, 30, 1.0), 0).answer.is_ok());
        assert_eq!(
            a.ask(2, lease(0, 30, 1.0), 0).answer,
            Err(Denial::UserCap),
            "the same user's second client"
        );
        assert_eq!(a.ask(2, lease(0, 60, 1.0), 0).answer, Err(Denial::TooLarge));
        assert!(a.ask(3, lease(0, 20, 1.0), 0).answer.is_ok());
        assert_eq!(a.ask(3, lease(1, 1, 1.0), 0).answer, Err(Denial::CgroupCap));
        // A cgroup whose name only begins the same is another cgroup.
        assert!(a.ask(4, lease(0, 100, 1.0), 0).answer.is_ok());
    }

    #[test]
    fn a_distrusted_client_is_refused_and_its_block_counted() {
        let mut a = arbiter(100);
        assert!(a.ask(1, lease(0, 40, 1.0), 0).answer.is_ok());
        a.release(1, &[0]);
        assert_eq!(a.granted(), 0);
        assert!(!a.holds(1, 0));
        a.distrust(1, 0, 40 * MIB, "still pinned".into());
        assert_eq!(a.granted(), 40 * MIB);
        assert_eq!(
            a.ask(1, lease(1, 1, 1.0), 0).answer,
            Err(Denial::Distrusted)
        );
        assert_eq!(a.counters.distrusted, 1);
        // Its leases end with its connection.
        a.disconnect(1);
        assert_eq!(a.used(), 0);
    }

    #[test]
    fn a_reclaim_not_honoured_is_overdue() {
        let mut a = arbiter(60);
        assert!(a.ask(2, lease(0, 40, 0.1), 0).answer.is_ok());
        assert!(a.ask(1, lease(0, 40, 9.0), 0).answer.is_err());
        assert!(a.overdue(1_000, 2_000).is_empty());
        assert_eq!(a.overdue(3_000, 2_000), vec![(2, 0)]);
    }
}
