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
            self.maps = ProcessMaps::read(std::process::id()).ok();
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
