//! The call site of an allocation in this process: the module and file offset of the caller's
//! return address, read from /proc/self/maps (re-read when an address is outside every known
//! mapping, e.g. after a dlopen).

use hotpin_history::maps::ProcessMaps;

use hotpin_policy::set::SiteKey;

#[derive(Debug, Default)]
pub struct Resolver {
    maps: Option<ProcessMaps>,
}

impl Resolver {
    pub fn resolve(&mut self, addr: usize) -> SiteKey {
        let addr = addr as u64;
        let pid = std::process::id();
        if self
            .maps
            .as_ref()
            .is_none_or(|m| m.module_offset(addr).is_none())
        {
            self.maps = ProcessMaps::read(pid).ok();
        }
        match self.maps.as_ref().and_then(|m| m.module_offset(addr)) {
            Some((module, offset)) => SiteKey::new(module, offset),
            None => SiteKey::new("[anon]", addr),
        }
    }
}
