//! The call site of an allocation in this process: the module and file offset of the caller's
//! return address, read from /proc/self/maps (re-read when an address is outside every known
//! mapping, e.g. after a dlopen).
//!
//! Each return address's site is kept once resolved: a loop allocating from one place asks
//! for the same address every time, and resolving it (a lookup in the maps, the module's file
//! name cut from its path, a new string) was most of what naming an allocation cost
//! (docs/bench/history.md, "What hotpin's hooks cost"). What is kept is forgotten whenever the
//! maps are read again, and when it grows past [`KEPT`] addresses.

use hotpin_history::maps::ProcessMaps;
use hotpin_policy::set::SiteKey;
use rustc_hash::FxHashMap;

/// The most return addresses whose sites are kept.
const KEPT: usize = 4096;

#[derive(Debug, Default)]
pub struct Resolver {
    maps: Option<ProcessMaps>,
    sites: FxHashMap<usize, SiteKey>,
    /// Times the maps were read, and what reading them took in all and at most (ns): done in
    /// the allocating thread, so a read inside a program's timed work is part of its time.
    pub maps_reads: u64,
    pub maps_read_ns: u64,
    pub maps_read_max_ns: u64,
}

impl Resolver {
    pub fn resolve(&mut self, addr: usize) -> SiteKey {
        if let Some(site) = self.sites.get(&addr) {
            return site.clone();
        }
        let at = addr as u64;
        if self
            .maps
            .as_ref()
            .is_none_or(|m| m.module_offset(at).is_none())
        {
            let began = std::time::Instant::now();
            self.maps = ProcessMaps::read(std::process::id()).ok();
            let took = began.elapsed().as_nanos() as u64;
            self.maps_reads += 1;
            self.maps_read_ns += took;
            self.maps_read_max_ns = self.maps_read_max_ns.max(took);
            self.sites.clear();
        }
        let site = match self.maps.as_ref().and_then(|m| m.module_offset(at)) {
            Some((module, offset)) => SiteKey::new(module, offset),
            None => SiteKey::new("[anon]", at),
        };
        if self.sites.len() >= KEPT {
            self.sites.clear();
        }
        self.sites.insert(addr, site.clone());
        site
    }
}
