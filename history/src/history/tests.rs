use super::*;

const PID: u32 = 100;
const MIB: u64 = 1 << 20;

fn site(history: &mut MemHistory, offset: u64) -> CallSiteId {
    history.intern_call_site(CallSite {
        module: "/bin/app".into(),
        offset,
        symbol: None,
    })
}

#[test]
fn find_returns_the_live_allocation_containing_a_pointer() {
    let mut h = MemHistory::new();
    let a = h.alloc(PID, 0x1000, 0x100, AllocKind::Pageable, None, 1);
    let b = h.alloc(PID, 0x2000, 0x100, AllocKind::Pinned, None, 2);
    assert_eq!(h.find(PID, 0x1000).map(|a| a.id), Some(a));
    assert_eq!(h.find(PID, 0x10ff).map(|a| a.id), Some(a));
    assert_eq!(
        h.find(PID, 0x1100).map(|a| a.id),
        None,
        "one past the end is outside"
    );
    assert_eq!(h.find(PID, 0x2050).map(|a| a.id), Some(b));
    assert_eq!(
        h.find(PID + 1, 0x2050).map(|a| a.id),
        None,
        "other processes are separate"
    );
    assert_eq!(h.find(PID, 0xfff).map(|a| a.id), None);
}

#[test]
fn an_address_reused_after_free_keeps_both_histories_with_one_active() {
    let mut h = MemHistory::new();
    let first = h.alloc(PID, 0x1000, 64, AllocKind::Pageable, None, 1);
    h.transfer(PID, 0xd000, 0x1000, 64, CopyDirection::HostToDevice, 2);
    assert_eq!(h.free(PID, 0x1000, 3), Some(first));
    assert!(
        h.find(PID, 0x1000).is_none(),
        "nothing is live there after the free"
    );
    let second = h.alloc(PID, 0x1000, 128, AllocKind::Pinned, None, 4);
    h.transfer(PID, 0x1000, 0xd000, 128, CopyDirection::DeviceToHost, 5);
    h.transfer(PID, 0x1000, 0xd000, 128, CopyDirection::DeviceToHost, 6);
    assert_ne!(first, second);
    assert_eq!(h.find(PID, 0x1000).map(|a| a.id), Some(second));
    let first = h.allocation(first).expect("kept");
    assert_eq!((first.stats.transfers, first.free_ns), (1, Some(3)));
    let second = h.allocation(second).expect("kept");
    assert_eq!((second.stats.d2h_count, second.stats.d2h_bytes), (2, 256));
}

#[test]
fn an_alloc_over_a_live_start_closes_the_old_history() {
    let mut h = MemHistory::new();
    let old = h.alloc(PID, 0x1000, 64, AllocKind::Pageable, None, 1);
    let new = h.alloc(PID, 0x1000, 64, AllocKind::Pageable, None, 2);
    assert_eq!(h.allocation(old).and_then(|a| a.free_ns), Some(2));
    assert_eq!(h.find(PID, 0x1000).map(|a| a.id), Some(new));
}

#[test]
fn hot_and_cold_queries_order_by_transfer_count() {
    let mut h = MemHistory::new();
    let ids: Vec<_> = (0..5u64)
        .map(|i| h.alloc(PID, 0x10000 * (i + 1), MIB, AllocKind::Pageable, None, i))
        .collect();
    for (i, &id) in ids.iter().enumerate() {
        let start = h.allocation(id).expect("exists").start;
        for t in 0..(i as u64 * 10) {
            h.transfer(
                PID,
                0xd000_0000,
                start + 8,
                4096,
                CopyDirection::HostToDevice,
                100 + t,
            );
        }
    }
    let device = h.alloc(PID, 0xd000_0000, MIB, AllocKind::Device, None, 0);
    let hot: Vec<_> = h.hotspots(2).iter().map(|a| a.id).collect();
    assert_eq!(hot, vec![ids[4], ids[3]]);
    let cold: Vec<_> = h.coldspots(2).iter().map(|a| a.id).collect();
    assert_eq!(cold, vec![ids[0], ids[1]]);
    let at_least_20: Vec<_> = h
        .hotspots_threshold(20)
        .iter()
        .map(|a| a.stats.transfers)
        .collect();
    assert_eq!(at_least_20, vec![40, 30, 20]);
    let at_most_10: Vec<_> = h
        .coldspots_threshold(10)
        .iter()
        .map(|a| a.stats.transfers)
        .collect();
    assert_eq!(at_most_10, vec![0, 10]);
    assert!(
        h.hotspots(100).iter().all(|a| a.id != device),
        "device memory is not a host hotspot"
    );
}

#[test]
fn a_transfer_from_unknown_memory_goes_to_an_untracked_entry() {
    let mut h = MemHistory::new();
    h.transfer(PID, 0xd000, 0x5000, 100, CopyDirection::HostToDevice, 1);
    h.transfer(PID, 0xd000, 0x5000, 300, CopyDirection::HostToDevice, 2);
    h.transfer(PID, 0x5000, 0xd000, 200, CopyDirection::DeviceToHost, 3);
    assert_eq!(h.stats().untracked_transfers, 3);
    assert_eq!(h.stats().transfers, 3);
    let hot = h.hotspots(1);
    let entry = hot.first().expect("the untracked entry is a hotspot");
    assert_eq!(entry.kind, AllocKind::Untracked);
    assert_eq!(
        (entry.start, entry.size, entry.stats.transfers),
        (0x5000, 300, 3)
    );
    assert!(
        h.find(PID, 0x5000).is_none(),
        "untracked entries are not live allocations"
    );
}

#[test]
fn unified_copies_resolve_direction_from_device_allocations() {
    let mut h = MemHistory::new();
    h.alloc(PID, 0xd000, 4096, AllocKind::Device, None, 1);
    let host = h.alloc(PID, 0x1000, 4096, AllocKind::Pageable, None, 2);
    h.transfer(PID, 0xd000, 0x1000, 4096, CopyDirection::Unresolved, 3);
    h.transfer(PID, 0x1000, 0xd000, 10, CopyDirection::Unresolved, 4);
    h.transfer(PID, 0xd100, 0xd000, 10, CopyDirection::Unresolved, 5);
    let stats = h.allocation(host).expect("exists").stats;
    assert_eq!(
        (stats.h2d_count, stats.d2h_count, stats.transfers),
        (1, 1, 2)
    );
    assert_eq!(
        h.stats().other_copies,
        1,
        "device to device is not a bus transfer"
    );
}

#[test]
fn register_pins_a_known_allocation_in_place_and_unregister_undoes_it() {
    let mut h = MemHistory::new();
    let id = h.alloc(PID, 0x1000, 4096, AllocKind::Pageable, None, 1);
    assert_eq!(h.register(PID, 0x1000, 4096, None, 2), id);
    assert_eq!(
        h.allocation(id).map(|a| a.kind),
        Some(AllocKind::Registered)
    );
    h.unregister(PID, 0x1000, 3);
    assert_eq!(h.allocation(id).map(|a| a.kind), Some(AllocKind::Pageable));
    let new = h.register(PID, 0x9000, 4096, None, 4);
    assert_ne!(new, id);
    let new = h.allocation(new).expect("exists");
    assert_eq!(new.kind, AllocKind::Registered);
    assert_eq!(new.events, vec![AllocEvent::Register { ts_ns: 4 }]);
}

#[test]
fn ordinals_count_host_and_device_allocations_per_call_site_and_process() {
    let mut h = MemHistory::new();
    let a = site(&mut h, 0x10);
    let b = site(&mut h, 0x20);
    assert_eq!(site(&mut h, 0x10), a, "interning is stable");
    let ordinals: Vec<_> = [(PID, a), (PID, a), (PID, b), (PID + 1, a), (PID, a)]
        .iter()
        .enumerate()
        .map(|(i, &(pid, s))| {
            let id = h.alloc(
                pid,
                0x1000 * (i as u64 + 1),
                8,
                AllocKind::Pageable,
                Some(s),
                0,
            );
            h.allocation(id).expect("exists").ordinal
        })
        .collect();
    assert_eq!(ordinals, vec![0, 1, 0, 0, 2]);
    assert_eq!(h.at_call_site(a).count(), 4);
    // A device allocation from the same site (ctypes calls everything from one place in
    // libffi) has its own count and does not shift the host ones hotpin matches against.
    let device = h.alloc(PID, 0xd000_0000, 8, AllocKind::Device, Some(a), 0);
    let host = h.alloc(PID, 0x9000, 8, AllocKind::Pageable, Some(a), 0);
    let ordinal = |id| h.allocation(id).expect("exists").ordinal;
    assert_eq!((ordinal(device), ordinal(host)), (0, 3));
}

#[test]
fn events_stay_in_timestamp_order_when_they_arrive_out_of_order() {
    let mut h = MemHistory::new();
    let id = h.alloc(PID, 0x1000, 64, AllocKind::Pageable, None, 10);
    for ts in [30, 20, 40, 25] {
        h.transfer(PID, 0xd000, 0x1000, 8, CopyDirection::HostToDevice, ts);
    }
    let times: Vec<_> = h
        .allocation(id)
        .expect("exists")
        .events
        .iter()
        .map(|e| e.ts_ns())
        .collect();
    assert_eq!(times, vec![10, 20, 25, 30, 40]);
    let stats = h.allocation(id).expect("exists").stats;
    assert_eq!(
        (stats.first_transfer_ns, stats.last_transfer_ns),
        (Some(20), Some(40))
    );
}

#[test]
fn nested_failed_and_partial_calls_are_counted_but_not_applied() {
    use hotpin_registry::events::{ApiCall, Op};
    use tracer_common::EventKind;
    let copy = |nested, partial, result| ApiCall {
        kind: EventKind::CuMemcpyHtoD,
        pid: PID,
        tid: PID,
        ts_ns: 1,
        duration_ns: 0,
        caller: 0,
        site: None,
        stack: None,
        result,
        nested,
        partial,
        repeat: 1,
        stream: 0,
        op: Op::Copy {
            dst: 0xd000,
            src: 0x1000,
            bytes: 8,
            direction: CopyDirection::HostToDevice,
        },
    };
    let mut h = MemHistory::new();
    h.apply(&copy(true, false, 0), None);
    h.apply(&copy(false, true, 0), None);
    h.apply(&copy(false, false, 2), None);
    assert_eq!(h.stats().transfers, 0);
    h.apply(&copy(false, false, 0), None);
    let s = h.stats();
    assert_eq!(
        (
            s.calls,
            s.nested_calls,
            s.partial_calls,
            s.failed_calls,
            s.transfers
        ),
        (4, 1, 1, 1, 1)
    );
}

#[test]
fn from_data_rebuilds_every_index_and_rejects_inconsistent_content() {
    let mut h = MemHistory::new();
    let s = site(&mut h, 0x42);
    let live = h.alloc(PID, 0x1000, 64, AllocKind::Pageable, Some(s), 1);
    let freed = h.alloc(PID, 0x2000, 64, AllocKind::Pageable, Some(s), 2);
    h.free(PID, 0x2000, 3);
    h.transfer(PID, 0xd000, 0x1000, 64, CopyDirection::HostToDevice, 4);
    h.transfer(PID, 0xd000, 0x7000, 64, CopyDirection::HostToDevice, 5);

    let mut rebuilt = MemHistory::from_data(h.data().clone()).expect("consistent");
    assert_eq!(rebuilt, h);
    assert_eq!(rebuilt.find(PID, 0x1010).map(|a| a.id), Some(live));
    assert!(rebuilt.find(PID, 0x2000).is_none());
    assert_eq!(rebuilt.hotspots(1)[0].id, h.hotspots(1)[0].id);
    assert_eq!(rebuilt.at_call_site(s).count(), 2);
    // Further recording continues the ordinals and the untracked entries.
    let next = rebuilt.alloc(PID, 0x3000, 8, AllocKind::Pageable, Some(s), 6);
    assert_eq!(rebuilt.allocation(next).map(|a| a.ordinal), Some(2));
    rebuilt.transfer(PID, 0xd000, 0x7000, 64, CopyDirection::HostToDevice, 7);
    let untracked = rebuilt
        .allocations()
        .iter()
        .filter(|a| a.kind == AllocKind::Untracked)
        .count();
    assert_eq!(untracked, 1);
    let _ = freed;

    let mut bad = h.data().clone();
    bad.allocations[0].call_site = Some(99);
    assert!(matches!(
        MemHistory::from_data(bad),
        Err(InvalidHistory::UnknownCallSite { site: 99, .. })
    ));
    let mut bad = h.data().clone();
    bad.allocations.swap(0, 1);
    assert!(matches!(
        MemHistory::from_data(bad),
        Err(InvalidHistory::IdOutOfOrder { .. })
    ));
    let mut bad = h.data().clone();
    bad.allocations[1].start = 0x1000;
    bad.allocations[1].free_ns = None;
    assert!(matches!(
        MemHistory::from_data(bad),
        Err(InvalidHistory::DuplicateLive { .. })
    ));
}

/// A mapping holds allocations: an address inside an allocation is the allocation's, one
/// outside every allocation is the mapping's; a run of faults is split between them.
#[test]
fn mappings_hold_allocations_and_faults_split_between_them() {
    let mut h = MemHistory::new();
    let page = tracer_common::PAGE_BYTES;
    let region = h.map(PID, 0x10_0000, 16 * page, 1);
    let inner = h.alloc(
        PID,
        0x10_0000 + 4 * page,
        2 * page,
        AllocKind::Pageable,
        None,
        2,
    );
    assert_eq!(
        h.find(PID, 0x10_0000 + 4 * page + 8).map(|a| a.id),
        Some(inner)
    );
    assert_eq!(
        h.find(PID, 0x10_0000 + 8 * page).map(|a| a.id),
        Some(region)
    );
    // 10 pages from the region's start: 4 region, 2 inner, 4 region.
    h.page_faults(PID, 0x10_0000, 10, 3);
    let faults = |h: &MemHistory, id| h.allocation(id).expect("exists").stats.page_faults;
    assert_eq!((faults(&h, region), faults(&h, inner)), (8, 2));
    // 4 pages past the region's end belong to nothing.
    h.page_faults(PID, 0x10_0000 + 16 * page, 4, 4);
    assert_eq!(h.stats().untracked_page_faults, 4);
    assert_eq!(h.stats().page_faults, 14);
}

/// munmap keeps what lies outside its range (a hole in the middle leaves two mappings);
/// mremap in place resizes, moved it starts a new mapping; brk grows the heap.
#[test]
fn unmap_remap_and_break_follow_the_kernel() {
    let mut h = MemHistory::new();
    let page = tracer_common::PAGE_BYTES;
    let whole = h.map(PID, 0x20_0000, 8 * page, 1);
    h.unmap(PID, 0x20_0000 + 2 * page, 2 * page, 2);
    assert_eq!(
        h.allocation(whole).map(|a| a.size),
        Some(2 * page),
        "head kept"
    );
    let tail = h.find(PID, 0x20_0000 + 4 * page).expect("tail kept");
    assert_eq!((tail.start, tail.size), (0x20_0000 + 4 * page, 4 * page));
    h.unmap(PID, 0x20_0000, 8 * page, 3);
    assert!(h.find(PID, 0x20_0000).is_none() && h.find(PID, 0x20_0000 + 5 * page).is_none());

    let moved = h.map(PID, 0x40_0000, page, 4);
    h.remap(PID, 0x40_0000, page, 0x40_0000, 3 * page, 5);
    assert_eq!(
        h.allocation(moved).map(|a| a.size),
        Some(3 * page),
        "in place"
    );
    h.remap(PID, 0x40_0000, 3 * page, 0x80_0000, 6 * page, 6);
    assert!(h.allocation(moved).is_some_and(|a| a.free_ns == Some(6)));
    assert_eq!(h.find(PID, 0x80_0000).map(|a| a.size), Some(6 * page));

    assert!(!h.has_heap(PID));
    h.set_break(PID, Some(0x100_0000), 0x100_0000 + 33 * page, 7);
    h.set_break(PID, None, 0x100_0000 + 66 * page, 8);
    let heap = h.find(PID, 0x100_0000 + 40 * page).expect("the heap grew");
    assert_eq!((heap.kind, heap.size), (AllocKind::Heap, 66 * page));
    assert!(h.has_heap(PID));
}

/// A long-lived process: a fresh buffer per step, copied both ways and freed, beside two
/// buffers that live throughout. Bounded, the history folds the freed ones by site and size
/// and keeps every count.
#[test]
fn a_bounded_history_folds_freed_allocations_and_keeps_every_count() {
    const STEPS: u64 = 10_000;
    let mut h = MemHistory::with_retention(Retention {
        timelines: false,
        max_allocations: Some(400),
    });
    let step = site(&mut h, 0x10);
    let held = site(&mut h, 0x20);
    h.alloc(PID, 0x100_0000, MIB, AllocKind::Pinned, Some(held), 0);
    h.alloc(PID, 0x200_0000, MIB, AllocKind::Pageable, Some(held), 0);
    let mut peak_len = 0;
    for i in 0..STEPS {
        let ts = 10 + 10 * i;
        // Two sizes from one site; addresses reused, as malloc reuses them.
        let (addr, size) = (0x300_0000 + (i % 3) * 0x10_0000, 4096 << (i % 2));
        h.alloc(PID, addr, size, AllocKind::Pageable, Some(step), ts);
        h.transfer(
            PID,
            0xd000_0000,
            addr,
            size,
            CopyDirection::HostToDevice,
            ts + 1,
        );
        h.transfer(
            PID,
            addr,
            0xd000_0000,
            size,
            CopyDirection::DeviceToHost,
            ts + 2,
        );
        h.transfer(
            PID,
            0xd000_0000,
            0x100_0000,
            64,
            CopyDirection::HostToDevice,
            ts + 3,
        );
        h.free(PID, addr, ts + 4);
        // The recorder bounds the history between batches.
        if i % 50 == 49 {
            h.bound();
        }
        peak_len = peak_len.max(h.allocations().len());
    }
    assert!(peak_len <= 400 + 50, "{peak_len} entries at most");
    assert!(h.allocations().iter().all(|a| a.events.is_empty()));
    // Nothing lost: the history's totals, and the entries' and aggregates' sums.
    assert_eq!(h.stats().transfers, 3 * STEPS);
    let mut sum = TransferStats::default();
    for a in h.allocations() {
        sum.add(&a.stats);
    }
    for g in h.compacted() {
        sum.add(&g.stats);
    }
    assert_eq!((sum.h2d_count, sum.d2h_count), (2 * STEPS, STEPS));
    assert_eq!(sum.h2d_bytes, h.stats().h2d_bytes);
    assert_eq!(sum.d2h_bytes, h.stats().d2h_bytes);
    let entries_at_step = h
        .allocations()
        .iter()
        .filter(|a| a.call_site == Some(step))
        .count() as u64;
    assert_eq!(h.compacted_allocations() + entries_at_step, STEPS);
    // One aggregate per size; one of each alive at a time.
    assert_eq!(h.compacted().len(), 2);
    for g in h.compacted() {
        assert_eq!(
            (g.call_site, g.kind, g.peak_live),
            (Some(step), AllocKind::Pageable, 1)
        );
        // Even steps allocate 4 KiB, odd ones 8 KiB.
        assert_eq!(g.first_ordinal as u64, g.size / 4096 - 1);
    }
    // The buffers that live on are still there, found by address and still hot.
    assert_eq!(
        h.find(PID, 0x100_0010).map(|a| a.stats.transfers),
        Some(STEPS)
    );
    assert!(h.find(PID, 0x200_0000).is_some());
    // Ordinals go on: the next allocation at the site is the STEPS-th.
    let next = h.alloc(
        PID,
        0x900_0000,
        4096,
        AllocKind::Pageable,
        Some(step),
        u64::MAX / 2,
    );
    assert_eq!(h.allocation(next).map(|a| a.ordinal), Some(STEPS as u32));
    // And the folded history is consistent.
    MemHistory::from_data(h.data().clone()).expect("consistent after folding");
}

#[test]
fn an_unbounded_history_keeps_every_allocation_and_its_timeline() {
    let mut h = MemHistory::new();
    for i in 0..100 {
        h.alloc(PID, 0x1000, 64, AllocKind::Pageable, None, 2 * i);
        h.free(PID, 0x1000, 2 * i + 1);
    }
    assert_eq!(h.bound(), 0);
    assert_eq!(h.allocations().len(), 100);
    assert!(h.allocations().iter().all(|a| a.events.len() == 2));
    assert!(h.compacted().is_empty());
}

#[test]
fn an_aggregate_naming_a_call_site_that_does_not_exist_is_refused() {
    let mut h = MemHistory::with_retention(Retention {
        timelines: true,
        max_allocations: Some(4),
    });
    let s = site(&mut h, 1);
    for i in 0..10 {
        h.alloc(PID, 0x1000, 64, AllocKind::Pageable, Some(s), 2 * i);
        h.free(PID, 0x1000, 2 * i + 1);
    }
    assert!(h.bound() > 0);
    let mut data = h.into_data();
    data.call_sites.clear();
    data.allocations.clear();
    assert!(matches!(
        MemHistory::from_data(data),
        Err(InvalidHistory::UnknownAggregateSite { .. })
    ));
}

#[test]
fn a_raw_call_site_is_resolved_once_per_history() {
    use hotpin_registry::events::RawSite;
    let mut h = MemHistory::new();
    let raw = RawSite::BuildId {
        build_id: [7; 20],
        offset: 0x40,
    };
    let mut resolved = 0;
    let site = || CallSite {
        module: "/bin/app".into(),
        offset: 0x40,
        symbol: Some("load".into()),
    };
    let first = h.intern_raw_site(raw, || {
        resolved += 1;
        Some(site())
    });
    let again = h.intern_raw_site(raw, || {
        resolved += 1;
        Some(site())
    });
    assert_eq!(first, again);
    assert_eq!(resolved, 1, "resolved once");
    // A frame that ends a walk stays one.
    let end = RawSite::BuildId {
        build_id: [8; 20],
        offset: 0x10,
    };
    assert_eq!(h.intern_raw_site(end, || None), None);
    assert_eq!(h.intern_raw_site(end, || Some(site())), None);
    // An address alone is resolved every time (the process's maps may change).
    let mut asked = 0;
    for _ in 0..2 {
        h.intern_raw_site(RawSite::Address(0x1234), || {
            asked += 1;
            Some(site())
        });
    }
    assert_eq!(asked, 2);
}

/// Each process's pinned memory (#27): by the program or by hotpin (its interposer's call
/// site), copied or never, folded allocations counted too, and what the node's arbiter did,
/// kept through a dump and read back.
#[test]
fn pinned_memory_is_accounted_per_process_with_its_leases() {
    let mut h = MemHistory::with_retention(Retention {
        timelines: false,
        max_allocations: Some(4),
    });
    let program = site(&mut h, 0x10);
    let hotpin = h.intern_call_site(CallSite {
        module: "/usr/lib/libhotpin_preload.so".into(),
        offset: 0x40,
        symbol: None,
    });
    // The program's 8 MiB pinned and copied whole, 4 MiB pinned and never copied; hotpin's 2 MiB.
    h.alloc(
        PID,
        0x100_0000,
        8 * MIB,
        AllocKind::Pinned,
        Some(program),
        1,
    );
    h.alloc(
        PID,
        0x200_0000,
        4 * MIB,
        AllocKind::Pinned,
        Some(program),
        2,
    );
    h.alloc(PID, 0x300_0000, 2 * MIB, AllocKind::Pinned, Some(hotpin), 3);
    h.transfer(
        PID,
        0xd000_0000,
        0x100_0000,
        8 * MIB,
        CopyDirection::HostToDevice,
        4,
    );
    // Ten 1 MiB pinned blocks made, copied once each but the last, freed: folded.
    for i in 0..10 {
        let ts = 10 + 10 * i;
        h.alloc(PID, 0x400_0000, MIB, AllocKind::Pinned, Some(program), ts);
        if i < 9 {
            h.transfer(
                PID,
                0x400_0000,
                0xd000_0000,
                MIB,
                CopyDirection::DeviceToHost,
                ts + 1,
            );
        }
        h.free(PID, 0x400_0000, ts + 2);
        h.bound();
    }
    assert!(!h.compacted().is_empty(), "some were folded");
    h.alloc(
        PID + 1,
        0x100_0000,
        MIB,
        AllocKind::Pageable,
        Some(program),
        200,
    );
    let leases = LeaseAccount {
        peak_leased_bytes: 2 * MIB,
        granted: 3,
        denied: 1,
        reclaimed: 1,
        reclaimed_bytes: MIB,
        distrusted: false,
    };
    h.set_leases(PID, leases);
    let expected = vec![PinnedAccount {
        pid: PID,
        pinned_bytes: 24 * MIB,
        by_hotpin_bytes: 2 * MIB,
        copied_bytes: 17 * MIB,
        never_copied_bytes: 7 * MIB,
        leases: Some(leases),
    }];
    assert_eq!(h.pinned_accounts(), expected);
    // In the dump, as written; read back, the same accounts.
    let dir = std::env::temp_dir().join(format!("hotpin-accounts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    let path = dir.join("h.json");
    crate::dump::write(&h, &path, crate::dump::Format::Json, false).expect("written");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("JSON");
    assert_eq!(json["pinned"][0]["never_copied_bytes"], 7 * MIB);
    assert_eq!(json["pinned"][0]["leases"]["granted"], 3);
    let back = crate::dump::read(&path).expect("read back");
    assert_eq!(back.pinned_accounts(), expected);
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// What loads comes back unchanged from a dump (the fuzzer's round trip): two accounts of
/// one process are refused, and accounts out of order are put in the order they are written.
#[test]
fn pinned_accounts_load_once_per_process_in_order() {
    use crate::history::{LeaseAccount, PinnedAccount};
    let account = |pid, denied| PinnedAccount {
        pid,
        leases: Some(LeaseAccount {
            denied,
            ..LeaseAccount::default()
        }),
        ..PinnedAccount::default()
    };
    let mut data = HistoryData {
        pinned: vec![account(1, 10), account(241, 1), account(1, 0)],
        ..HistoryData::default()
    };
    assert!(matches!(
        MemHistory::from_data(data.clone()),
        Err(InvalidHistory::DuplicateAccount { pid: 1 })
    ));
    data.pinned.pop();
    data.pinned.reverse();
    let history = MemHistory::from_data(data).expect("consistent");
    for format in [crate::dump::Format::Json, crate::dump::Format::Binary] {
        let encoded = crate::dump::encode(history.data(), format, true).expect("encodes");
        let reloaded = MemHistory::from_data(crate::dump::decode(&encoded).expect("decodes"))
            .expect("consistent");
        assert_eq!(reloaded.data(), history.data(), "{format:?}");
    }
}

#[test]
fn copies_keep_the_part_of_an_allocation_they_touched_and_the_account_counts_only_that() {
    let mut h = MemHistory::new();
    let dataset = h.alloc(PID, 0x1000_0000, 64 * MIB, AllocKind::Pinned, None, 1);
    let never = h.alloc(PID, 0x8000_0000, MIB, AllocKind::Pinned, None, 2);
    // One 2 MiB slice at 10 MiB copied three times, then one copy at 12 MiB.
    for t in 0..3 {
        h.transfer(
            PID,
            0xd000_0000,
            0x1000_0000 + 10 * MIB,
            2 * MIB,
            CopyDirection::HostToDevice,
            10 + t,
        );
    }
    h.transfer(
        PID,
        0x1000_0000 + 12 * MIB,
        0xd000_0000,
        MIB,
        CopyDirection::DeviceToHost,
        20,
    );
    assert_eq!(h.copied_extent(dataset), Some((10 * MIB, 13 * MIB)));
    assert_eq!(h.copied_extent(never), None);
    // A copy running past the end is kept inside the allocation.
    h.transfer(
        PID,
        0xd000_0000,
        0x1000_0000 + 63 * MIB,
        4 * MIB,
        CopyDirection::HostToDevice,
        30,
    );
    assert_eq!(h.copied_extent(dataset), Some((10 * MIB, 64 * MIB)));
    let accounts = h.pinned_accounts();
    assert_eq!(accounts.len(), 1);
    assert_eq!(accounts[0].pinned_bytes, 65 * MIB);
    assert_eq!(accounts[0].copied_bytes, 54 * MIB);
    assert_eq!(accounts[0].never_copied_bytes, 11 * MIB);

    // An extent of no allocation, or an empty one, is refused, saying which.
    let mut data = h.into_data();
    data.copied_extents.insert(99, (0, MIB));
    assert!(matches!(
        MemHistory::from_data(data.clone()),
        Err(InvalidHistory::BadExtent { id: 99, .. })
    ));
    data.copied_extents.remove(&99);
    data.copied_extents.insert(never, (MIB, MIB));
    assert!(matches!(
        MemHistory::from_data(data),
        Err(InvalidHistory::BadExtent { id, .. }) if id == never
    ));
}
