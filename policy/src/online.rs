//! Deciding while the program runs: what a block of host memory has been copied, whether
//! pinning it repays, how dense its benefit is, and which blocks a pinned budget keeps.
//!
//! - **Promotion (rent or buy).** A block is pinned once the copy time it has lost to
//!   pageable copies reaches what pinning it costs (register and unregister). Its future
//!   copies are not known; this rule never pays more than twice what knowing them would have
//!   (the classic ski-rental bound), and memory copied once is never pinned.
//! - **Density.** Under a budget, a block's worth is the copy time pinning saves it per
//!   second per pinned byte, decayed with a half-life so that a hot set that changes is
//!   followed. A candidate takes the place of held blocks only if it is [`HYSTERESIS`] times
//!   denser than each of them: nothing flaps.
//! - **Recycled groups.** Blocks of one size from one call site that are freed and made again
//!   are judged together, as one block: a freed pinned block goes to the cache and the next
//!   of its group is served from it, so the group pays one registration, not one per block.
//!   Once the blocks retired from a group (two at least) together lost what pinning one of
//!   them costs, the next block of the group is pinned at birth. A fresh `.cpu()` result each
//!   step, copied once, is such a group.
//! - **Trusted groups** (#40 item 3). Where one copy of a block saves more than registering
//!   and unregistering it costs (large blocks: on the H200 a pageable copy of 1 GiB takes
//!   about 130 ms, registering and unregistering it about 60, a pinned copy 20), pinning
//!   before the first copy repays even a block copied once. Once [`TRUSTED_AFTER`] blocks of
//!   a group (same call site and Python line, same size) were each worth it on their first
//!   copy (by the cost model, or by that copy's own measured time, which the interposer takes
//!   where the model says no: [`Online::measured_copy_repays`]), the group's next blocks are
//!   pinned before their first copy: layers streamed from
//!   CPU memory are pinned during the first forward, not after the second. A block pinned so
//!   that is not copied again within [`TRUST_IDLE_NS`] is let go (a group of blocks each
//!   copied once, as a model moved to the GPU at start).
//!
//! The interposer pins a large block's copied part alone where that part is small
//! (`preload/src/online.rs`); the rules here weigh whatever range it would register.
//!
//! The cost model is [`CostModel`], the same that judges histories; nothing here calls CUDA.

use rustc_hash::FxHashMap;

use hotpin_history::history::TransferStats;

use crate::cost::CostModel;

/// The largest block pinned at birth (from a history or a hot group): a larger one waits for
/// its copies to repay it, so that allocating never waits long on a registration.
pub const LARGEST_AT_BIRTH: usize = 64 << 20;
/// A candidate must be this many times denser than each block it displaces.
pub const HYSTERESIS: f64 = 2.0;
/// How fast a block's density forgets its past copies, by default.
pub const HALF_LIFE_NS: u64 = 2_000_000_000;
/// Blocks of a group whose first copy alone was worth pinning them before the group is
/// trusted: its next blocks are pinned before their first copy.
pub const TRUSTED_AFTER: u64 = 2;
/// A block pinned before its first copy on its group's trust, and not copied again within
/// this long, is let go.
pub const TRUST_IDLE_NS: u64 = 1_000_000_000;

/// The copies one block served, by direction, and its decayed benefit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Heat {
    pub stats: TransferStats,
    /// Copy seconds pinning saved (or would have saved) it, decayed to `updated_ns`.
    pub decayed_saving_s: f64,
    pub updated_ns: u64,
}

/// The counts of one copy of `bytes` (`to_device`: host memory read; else written).
fn one_copy(bytes: u64, to_device: bool) -> TransferStats {
    let mut one = TransferStats::default();
    if to_device {
        one.h2d_count = 1;
        one.h2d_bytes = bytes;
    } else {
        one.d2h_count = 1;
        one.d2h_bytes = bytes;
    }
    one.transfers = 1;
    one
}

impl Heat {
    /// Adds one copy of `bytes` (`to_device`: host memory read; else written) at `now_ns`;
    /// returns that copy's counts.
    pub fn copy(
        &mut self,
        policy: &Online,
        bytes: u64,
        to_device: bool,
        now_ns: u64,
    ) -> TransferStats {
        let one = one_copy(bytes, to_device);
        if self.stats.transfers == 0 {
            self.updated_ns = now_ns;
        }
        self.decayed_saving_s = policy.decay(self.decayed_saving_s, self.updated_ns, now_ns)
            + policy.model.copy_saving(&one);
        self.updated_ns = self.updated_ns.max(now_ns);
        self.stats.add(&one);
        one
    }
}

/// The cost model, the half-life, and the arithmetic of the rules above.
#[derive(Clone, Copy, Debug)]
pub struct Online {
    pub model: CostModel,
    pub half_life_ns: u64,
}

impl Online {
    pub fn new(model: CostModel) -> Self {
        Self {
            model,
            half_life_ns: HALF_LIFE_NS,
        }
    }

    fn decay(&self, value: f64, from_ns: u64, to_ns: u64) -> f64 {
        let elapsed = to_ns.saturating_sub(from_ns) as f64;
        value * 0.5f64.powf(elapsed / self.half_life_ns.max(1) as f64)
    }

    /// What pinning `len` bytes costs: register and unregister.
    pub fn pin_cost(&self, len: usize) -> f64 {
        self.model.pin_cost(len as u64, 1)
    }

    /// Whether one copy of `bytes` (`to_device`: host memory read) saves more than pinning a
    /// block of `len` bytes costs (register and unregister): pinned before that copy, the
    /// block repays even if it is never copied again.
    pub fn one_copy_repays(&self, bytes: u64, to_device: bool, len: usize) -> bool {
        self.model.copy_saving(&one_copy(bytes, to_device)) > self.pin_cost(len)
    }

    /// Whether one pageable copy of `bytes` measured at `seconds` (made while its stream had
    /// nothing else queued) would have saved more, pinned, than pinning a block of `len` bytes
    /// costs. The model's pageable bandwidth is one machine's (the H100's unless `hotpin
    /// calibrate` wrote this machine's); the copy's own time is this machine's now (on the
    /// H200 pageable copies of 4-16 MiB ran at 6-9 GB/s where the H100's model says 11.5-12,
    /// docs/benchmarks.md section 1).
    pub fn measured_copy_repays(
        &self,
        seconds: f64,
        bytes: u64,
        to_device: bool,
        len: usize,
    ) -> bool {
        seconds - self.model.pinned_copy_s(bytes, to_device) > self.pin_cost(len)
    }

    /// Whether a pageable block of `len` bytes has lost to its copies what pinning it costs.
    pub fn repays(&self, heat: &Heat, len: usize) -> bool {
        heat.stats.transfers > 1 && self.model.copy_saving(&heat.stats) >= self.pin_cost(len)
    }

    /// Copy seconds saved per second per pinned byte, as of `now_ns`.
    pub fn density(&self, heat: &Heat, len: usize, now_ns: u64) -> f64 {
        let rate = self.decay(heat.decayed_saving_s, heat.updated_ns, now_ns)
            / (self.half_life_ns as f64 / 1e9 / std::f64::consts::LN_2);
        rate / len.max(1) as f64
    }
}

/// A pinned-memory budget shared by the blocks it admits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budget {
    /// None: no limit.
    pub limit: Option<u64>,
    pub used: u64,
}

/// What a candidate block gets from the budget.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission<K> {
    /// Room is there (now reserved).
    Admitted,
    /// Room once these held blocks are let go (reserved for the candidate already).
    Displacing(Vec<K>),
    /// Not dense enough to displace what is held.
    Refused,
}

impl Budget {
    pub fn new(limit: Option<u64>) -> Self {
        Self { limit, used: 0 }
    }

    /// Admits `len` bytes of density `density`, displacing held blocks `(key, density,
    /// bytes)` that are [`HYSTERESIS`] times less dense, least dense first, if that makes room.
    pub fn admit<K: Copy>(
        &mut self,
        len: u64,
        density: f64,
        held: impl IntoIterator<Item = (K, f64, u64)>,
    ) -> Admission<K> {
        if self.has_room(len) {
            self.take(len);
            return Admission::Admitted;
        }
        // No room, so there is a limit.
        let limit = self.limit.unwrap_or(u64::MAX);
        if len > limit {
            return Admission::Refused;
        }
        let mut weaker: Vec<(K, f64, u64)> = held
            .into_iter()
            .filter(|&(_, d, _)| d * HYSTERESIS < density)
            .collect();
        weaker.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut freed = 0;
        let mut chosen = Vec::new();
        for (key, _, bytes) in weaker {
            if self.used - freed + len <= limit {
                break;
            }
            freed += bytes;
            chosen.push(key);
        }
        if self.used - freed + len > limit {
            return Admission::Refused;
        }
        self.used = self.used - freed + len;
        Admission::Displacing(chosen)
    }

    /// Whether `len` more bytes fit under the limit, without displacing anything: the one
    /// budget rule of every mode (auto mode's [`Self::admit`] displaces where this says no).
    pub fn has_room(&self, len: u64) -> bool {
        len <= self.room()
    }

    /// The bytes still free under the limit (all of them without one).
    pub fn room(&self) -> u64 {
        self.limit
            .map_or(u64::MAX, |limit| limit.saturating_sub(self.used))
    }

    /// Counts `len` bytes as held: a block registered (or reserved for registering) after
    /// [`Self::has_room`] said yes, or one the tally must know of whatever the limit.
    pub fn take(&mut self, len: u64) {
        self.used += len;
    }

    /// Gives back `len` bytes (a block unpinned, or a reservation not carried out).
    pub fn release(&mut self, len: u64) {
        self.used = self.used.saturating_sub(len);
    }
}

/// One recycled group: blocks of one size from one call site.
#[derive(Clone, Copy, Debug, Default)]
struct Group {
    /// Blocks freed, and the copy seconds pinning saved (or would have saved) them together.
    retired: u64,
    retired_saving_s: f64,
    /// Blocks alive now.
    live: u64,
    /// A block was made after one was freed: the group makes blocks again and again (a
    /// step's result), not a set made once (a model's layers).
    reborn: bool,
    /// Blocks whose first copy alone was worth pinning them before it, and blocks whose
    /// first copy (of a pageable block) was not.
    first_copies_repaid: u64,
    first_copies_not_repaid: u64,
    /// What every copy of any of its blocks saved, decayed as a block's [`Heat`] is.
    decayed_saving_s: f64,
    updated_ns: u64,
}

impl Group {
    /// Its retired blocks (two at least) together lost what pinning one of its blocks of
    /// `size` bytes costs.
    fn hot(&self, policy: &Online, size: u64) -> bool {
        self.retired >= 2 && self.retired_saving_s >= policy.pin_cost(size as usize)
    }
}

/// Recycled groups, by call site and size: the blocks they retired and what those saved, the
/// blocks alive, and the copy time the group saves per second.
///
/// Asked at every allocation, free and copy of a tracked block, under the interposer's lock:
/// keyed by site, then size, so that a lookup borrows the site instead of cloning it (its
/// module name is a string), with a fast hash (the keys are the program's own call sites, not
/// input an attacker chooses).
#[derive(Debug, Default)]
pub struct Groups<K> {
    groups: FxHashMap<K, FxHashMap<u64, Group>>,
}

impl<K: std::hash::Hash + Eq + Clone> Groups<K> {
    pub fn new() -> Self {
        Self {
            groups: FxHashMap::default(),
        }
    }

    fn group(&self, site: &K, size: u64) -> Option<&Group> {
        self.groups.get(site)?.get(&size)
    }

    /// The group, made if it is new (the site cloned only then).
    fn group_mut(&mut self, site: &K, size: u64) -> &mut Group {
        if !self.groups.contains_key(site) {
            self.groups.insert(site.clone(), FxHashMap::default());
        }
        self.groups
            .get_mut(site)
            .expect("inserted above")
            .entry(size)
            .or_default()
    }

    /// A block of the group made.
    pub fn born(&mut self, site: &K, size: u64) {
        let group = self.group_mut(site, size);
        group.live += 1;
        group.reborn |= group.retired > 0;
    }

    /// Whether a freed pinned block of `block` bytes is one a hot group that makes blocks
    /// again and again will want for its next (`crate::reuse::serves`, pages of `page`
    /// bytes): not to be handed to a block that is not worth pinning.
    pub fn claims(&self, policy: &Online, block: u64, page: usize) -> bool {
        self.groups.values().any(|sizes| {
            sizes.iter().any(|(&size, group)| {
                group.reborn
                    && crate::reuse::serves(block as usize, size as usize, page)
                    && group.hot(policy, size)
            })
        })
    }

    /// A block of the group freed, with the copy seconds pinning saved (or would have) it.
    pub fn retire(&mut self, site: &K, size: u64, saving_s: f64) {
        let group = self.group_mut(site, size);
        group.retired += 1;
        group.retired_saving_s += saving_s;
        group.live = group.live.saturating_sub(1);
    }

    /// A copy of one of its blocks that pinning saves (or would save) `saving_s`, at `now_ns`.
    pub fn copied(&mut self, policy: &Online, site: &K, size: u64, saving_s: f64, now_ns: u64) {
        let group = self.group_mut(site, size);
        group.decayed_saving_s =
            policy.decay(group.decayed_saving_s, group.updated_ns, now_ns) + saving_s;
        group.updated_ns = group.updated_ns.max(now_ns);
    }

    /// One of its blocks was copied for the first time, and that copy alone was worth pinning
    /// it before ([`Online::one_copy_repays`]).
    pub fn first_copy_repaid(&mut self, site: &K, size: u64) {
        self.group_mut(site, size).first_copies_repaid += 1;
    }

    /// One of its pageable blocks was copied for the first time and timed, and that copy
    /// alone was not worth pinning it before (by the model nor by its measured time).
    pub fn first_copy_not_repaid(&mut self, site: &K, size: u64) {
        self.group_mut(site, size).first_copies_not_repaid += 1;
    }

    /// Whether the group's blocks are pinned before their first copy: [`TRUSTED_AFTER`] of
    /// them were each worth it on their own first copy, and more were than were not (a first
    /// copy's measured time can read slow where it waited on other work: two such must not
    /// trust a group whose other first copies say no).
    pub fn trusted(&self, site: &K, size: u64) -> bool {
        self.group(site, size).is_some_and(|group| {
            group.first_copies_repaid >= TRUSTED_AFTER
                && group.first_copies_repaid > group.first_copies_not_repaid
        })
    }

    /// Whether the next block of this group is to be pinned at birth: its retired blocks
    /// (two at least) together lost what pinning one block of the group costs (rent or buy
    /// over the group, whose blocks share one registration through the cache).
    pub fn hot(&self, policy: &Online, site: &K, size: u64) -> bool {
        self.group(site, size)
            .is_some_and(|group| group.hot(policy, size))
    }

    /// The density of one place in a hot group (None for a group that is not hot): the copy
    /// time the whole group saves per second, shared by the blocks it keeps alive, per byte.
    /// A block of the group born a moment ago has lost little on its own yet, but it holds
    /// the place its predecessors earned: judged alone it would look nearly worthless and
    /// be displaced by (and displace) the next candidate at every step.
    pub fn place_density(&self, policy: &Online, site: &K, size: u64, now_ns: u64) -> Option<f64> {
        if !self.hot(policy, site, size) {
            return None;
        }
        let group = self.group(site, size)?;
        let heat = Heat {
            decayed_saving_s: group.decayed_saving_s,
            updated_ns: group.updated_ns,
            ..Heat::default()
        };
        let places = group.live.max(1);
        Some(policy.density(&heat, size as usize, now_ns) / places as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn a_block_copied_once_is_never_pinned_and_one_copied_often_is() {
        let online = Online::new(CostModel::default());
        let mut heat = Heat::default();
        heat.copy(&online, 64 << 20, true, 0);
        assert!(!online.repays(&heat, 64 * MIB), "one copy never repays");
        heat.copy(&online, 64 << 20, true, 1_000);
        assert!(
            online.repays(&heat, 64 * MIB),
            "two 64 MiB copies repay 64 MiB"
        );
        // A 1 GiB block copied 4 KiB at a time: pinning costs more than it saves.
        let mut small = Heat::default();
        for i in 0..10 {
            small.copy(&online, 4096, true, i);
        }
        assert!(!online.repays(&small, 1 << 30));
    }

    /// A hot group that makes blocks again after freeing some claims freed blocks of its size;
    /// a set made once and then freed (a model's layers moved away) claims nothing.
    #[test]
    fn only_a_hot_group_that_makes_blocks_again_claims_freed_blocks() {
        let policy = Online::new(CostModel::default());
        let size = 32u64 << 20;
        let page = 4096;
        let mut groups: Groups<&str> = Groups::new();
        for _ in 0..3 {
            groups.born(&"layers", size);
        }
        for _ in 0..3 {
            groups.retire(&"layers", size, 1.0);
        }
        assert!(groups.hot(&policy, &"layers", size));
        assert!(!groups.claims(&policy, size, page), "made once, then freed");
        for _ in 0..3 {
            groups.born(&"results", size);
            groups.retire(&"results", size, 1.0);
        }
        assert!(groups.claims(&policy, size, page));
        assert!(groups.claims(&policy, size + size / 10, page));
        assert!(
            !groups.claims(&policy, 2 * size, page),
            "too large to be reused for it"
        );
    }

    #[test]
    fn a_group_whose_first_copies_mostly_did_not_repay_is_not_trusted() {
        let mut groups: Groups<&str> = Groups::new();
        for _ in 0..3 {
            groups.first_copy_not_repaid(&"layers", 4 << 20);
        }
        groups.first_copy_repaid(&"layers", 4 << 20);
        groups.first_copy_repaid(&"layers", 4 << 20);
        assert!(!groups.trusted(&"layers", 4 << 20), "two of five");
        groups.first_copy_repaid(&"layers", 4 << 20);
        groups.first_copy_repaid(&"layers", 4 << 20);
        assert!(groups.trusted(&"layers", 4 << 20), "four of seven");
    }

    #[test]
    fn a_measured_copy_slower_than_the_model_repays_where_the_model_says_no() {
        let online = Online::new(CostModel::default());
        let size = 4 * MIB as u64;
        // The built-in model: one copy of 4 MiB does not repay its pin.
        assert!(!online.one_copy_repays(size, true, 4 * MIB));
        let model_s =
            size as f64 / (crate::cost::bandwidth(&online.model.h2d_pageable, size) * 1e9);
        // Measured at the model's own speed: the same answer.
        assert!(!online.measured_copy_repays(model_s, size, true, 4 * MIB));
        // At 6 GB/s (the H200's pageable copies of this size in a program): it repays.
        assert!(online.measured_copy_repays(size as f64 / 6e9, size, true, 4 * MIB));
        // A slice of a large block still does not repay pinning all of it.
        assert!(!online.measured_copy_repays(size as f64 / 6e9, size, true, 256 * MIB));
    }

    #[test]
    fn a_group_is_trusted_once_two_first_copies_each_repaid_a_pin_before_them() {
        let online = Online::new(CostModel::default());
        // Large: one copy saves more than registering and unregistering; small: it does not.
        assert!(online.one_copy_repays(64 << 20, true, 64 * MIB));
        assert!(!online.one_copy_repays(64 << 10, true, 64 << 10));
        // A slice of a large block does not repay pinning all of it.
        assert!(!online.one_copy_repays(64 << 10, true, 64 * MIB));
        let mut groups = Groups::new();
        groups.born(&"layers", 64 << 20);
        groups.first_copy_repaid(&"layers", 64 << 20);
        assert!(
            !groups.trusted(&"layers", 64 << 20),
            "one block is no pattern"
        );
        groups.first_copy_repaid(&"layers", 64 << 20);
        assert!(groups.trusted(&"layers", 64 << 20));
        assert!(
            !groups.trusted(&"layers", 32 << 20),
            "another size, another group"
        );
    }

    #[test]
    fn density_decays_with_the_half_life() {
        let online = Online::new(CostModel::default());
        let mut heat = Heat::default();
        heat.copy(&online, 64 << 20, false, 0);
        let now = online.density(&heat, 64 * MIB, 0);
        let later = online.density(&heat, 64 * MIB, HALF_LIFE_NS);
        assert!((later / now - 0.5).abs() < 1e-9, "{now} {later}");
    }

    #[test]
    fn has_room_is_the_limit_and_take_and_release_the_tally() {
        let mut budget = Budget::new(Some(100));
        assert!(budget.has_room(100));
        budget.take(60);
        assert!(budget.has_room(40) && !budget.has_room(41));
        budget.release(60);
        assert!(budget.has_room(100));
        let mut free = Budget::new(None);
        free.take(u64::MAX / 2);
        assert!(free.has_room(u64::MAX));
    }

    #[test]
    fn the_budget_displaces_only_blocks_much_less_dense() {
        let mut budget = Budget::new(Some(100));
        assert_eq!(budget.admit::<u32>(60, 1.0, []), Admission::Admitted);
        // Not twice as dense: refused, nothing displaced.
        assert_eq!(budget.admit(60, 1.5, [(7u32, 1.0, 60)]), Admission::Refused);
        assert_eq!(budget.used, 60);
        // Three times as dense: displaces it.
        assert_eq!(
            budget.admit(60, 3.0, [(7u32, 1.0, 60)]),
            Admission::Displacing(vec![7])
        );
        assert_eq!(budget.used, 60);
        // Least dense first, only as many as needed.
        let mut budget = Budget::new(Some(100));
        budget.used = 100;
        assert_eq!(
            budget.admit(30, 10.0, [(1u32, 2.0, 40), (2, 1.0, 40), (3, 0.5, 20)]),
            Admission::Displacing(vec![3, 2])
        );
        assert_eq!(budget.used, 70);
        // Larger than the whole budget: refused.
        assert_eq!(budget.admit::<u32>(101, 1e9, []), Admission::Refused);
    }

    #[test]
    fn a_place_in_a_hot_group_is_worth_what_one_block_copied_as_often_is() {
        let online = Online::new(CostModel::default());
        let size = 32u64 << 20;
        let one = TransferStats {
            h2d_count: 1,
            h2d_bytes: size,
            transfers: 1,
            ..Default::default()
        };
        let saving = online.model.copy_saving(&one);
        // Every 20 ms step: one block that lives on is copied twice; four fresh blocks of a
        // group are made, each copied twice, and freed.
        let mut alone = Heat::default();
        let mut groups = Groups::new();
        let mut place = None;
        for step in 0..100u64 {
            let now = step * 20_000_000;
            alone.copy(&online, size, true, now);
            alone.copy(&online, size, true, now);
            for _ in 0..4 {
                groups.born(&"fresh", size);
            }
            for _ in 0..8 {
                groups.copied(&online, &"fresh", size, saving, now);
            }
            if step == 0 {
                assert_eq!(groups.place_density(&online, &"fresh", size, now), None);
            }
            place = groups.place_density(&online, &"fresh", size, now);
            for _ in 0..4 {
                groups.retire(&"fresh", size, 2.0 * saving);
            }
        }
        let place = place.expect("a hot group");
        let alone = online.density(&alone, size as usize, 99 * 20_000_000);
        assert!((place / alone - 1.0).abs() < 0.01, "{place} {alone}");
    }

    #[test]
    fn a_group_is_hot_once_its_retired_blocks_together_repaid_one_pin() {
        let online = Online::new(CostModel::default());
        let mut groups = Groups::new();
        let cost = online.pin_cost(32 * MIB);
        groups.retire(&"site", 32 << 20, cost * 3.0);
        assert!(
            !groups.hot(&online, &"site", 32 << 20),
            "one block is no group"
        );
        groups.retire(&"site", 32 << 20, 0.0);
        assert!(groups.hot(&online, &"site", 32 << 20));
        assert!(!groups.hot(&online, &"site", 16 << 20), "another size");
        // Blocks that each lose less than a pin, but together more: the cache makes them one.
        groups.retire(&"fresh", 32 << 20, cost * 0.6);
        groups.retire(&"fresh", 32 << 20, cost * 0.6);
        assert!(groups.hot(&online, &"fresh", 32 << 20));
        groups.retire(&"cold", 32 << 20, 0.0);
        groups.retire(&"cold", 32 << 20, cost / 4.0);
        assert!(!groups.hot(&online, &"cold", 32 << 20));
        // A D2H result of 32 MiB copied once per step, on the H100's costs: each copy saves
        // less than a pin costs, two together more.
        let h100 = CostModel::default();
        let one = TransferStats {
            d2h_count: 1,
            d2h_bytes: 32 << 20,
            transfers: 1,
            ..Default::default()
        };
        let saving = h100.copy_saving(&one);
        assert!(saving < online.pin_cost(32 * MIB), "{saving}");
        assert!(2.0 * saving >= online.pin_cost(32 * MIB), "{saving}");
    }
}
