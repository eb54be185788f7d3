//! Pinned memory that copies touched only a part of (#42): a 4 GiB `pin_memory()` dataset of
//! which one 64 MiB slice is copied is hot, so it is not "pinned and wasted", yet nearly all
//! of it is pinned for nothing. The history keeps, per allocation, the span its copies
//! touched (`HistoryData::copied_extents`); this says where that leaves most of a pinned
//! block untouched, and what to change.

use hotpin_history::history::{Allocation, MemHistory};
use serde::Serialize;

use crate::{bytes, site_name};

/// A pinned block is advised as partly copied where its copies left at least this much of
/// it untouched...
pub const LEAST_UNTOUCHED_BYTES: u64 = 64 << 20;

/// ... and at least half of it.
const LEAST_UNTOUCHED_SHARE: f64 = 0.5;

/// A pinned allocation, kept pinned for its copies, of which they touched only a part.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct PartlyCopied {
    pub id: u64,
    pub pid: u32,
    /// The call site that made it.
    pub call_site: String,
    /// The innermost Python line that made it (CPython programs).
    pub python_line: Option<String>,
    pub size: u64,
    /// The span its copies touched, offsets from its start: from the lowest copied byte to
    /// the highest (copies far apart count what lies between as touched).
    pub copied_from: u64,
    pub copied_to: u64,
    pub transfers: u64,
}

impl PartlyCopied {
    /// What is pinned and no copy touched.
    pub fn untouched_bytes(&self) -> u64 {
        self.size - (self.copied_to - self.copied_from)
    }

    /// Where it was made: the Python line first, then the call site.
    pub fn place(&self) -> String {
        crate::place_of(&self.call_site, self.python_line.as_deref(), str::to_owned)
    }

    /// Its line in "Pinned and wasted", the call site named by `name`.
    pub fn listed(&self, name: impl Fn(&str) -> String) -> String {
        format!(
            "allocation {}, made at {}: {}, {} never: pin only that part",
            self.id,
            crate::place_of(&self.call_site, self.python_line.as_deref(), name),
            self.use_of(),
            bytes(self.untouched_bytes())
        )
    }

    /// The change, in one line: pin only the part copies use.
    pub fn advice(&self) -> String {
        format!(
            "Pin only the part that is copied of the allocation made at {}: {}, {} pinned and \
             never copied",
            self.place(),
            self.use_of(),
            bytes(self.untouched_bytes())
        )
    }

    /// "4.0 GiB pinned, its 150 copies touched 64.0 MiB of it (at 1.5 GiB)".
    fn use_of(&self) -> String {
        format!(
            "{} pinned, its {} copies touched {} of it (at {})",
            bytes(self.size),
            self.transfers,
            bytes(self.copied_to - self.copied_from),
            bytes(self.copied_from)
        )
    }
}

/// The pinned allocations of `host` not in `wasted` whose copies left most of them untouched
/// (see [`LEAST_UNTOUCHED_BYTES`]), most untouched first.
pub(crate) fn partly_copied(
    history: &MemHistory,
    host: &[&Allocation],
    wasted: &[&Allocation],
) -> Vec<PartlyCopied> {
    let mut list: Vec<PartlyCopied> = host
        .iter()
        .filter(|a| a.kind.is_pinned())
        .filter_map(|a| {
            let (from, to) = history.copied_extent(a.id)?;
            let untouched = a.size - (to - from);
            let partly = untouched >= LEAST_UNTOUCHED_BYTES
                && untouched as f64 >= LEAST_UNTOUCHED_SHARE * a.size as f64
                && !wasted.iter().any(|w| w.id == a.id);
            partly.then(|| PartlyCopied {
                id: a.id,
                pid: a.pid,
                call_site: site_name(history, a.call_site),
                python_line: history
                    .python_line(a.id)
                    .map(|line| site_name(history, Some(line))),
                size: a.size,
                copied_from: from,
                copied_to: to,
                transfers: a.stats.transfers,
            })
        })
        .collect();
    list.sort_by_key(|p| std::cmp::Reverse(p.untouched_bytes()));
    list
}
