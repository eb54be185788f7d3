//! MemHistory's speed and size: ingest rate, hot/cold queries with 1M allocations, and dump
//! and load of 1M allocations. `cargo bench -p hotpin-history --bench history`; results in
//! docs/bench/history.md.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use hotpin_history::{
    dump::{self, Format},
    history::{AllocKind, CallSite, MemHistory},
};
use hotpin_registry::events::{ApiCall, Op};
use hotpin_registry::registry::{AllocSpace, CopyDirection};
use tracer_common::EventKind;

const PID: u32 = 42;

fn call(kind: EventKind, ts_ns: u64, op: Op) -> ApiCall {
    ApiCall {
        kind,
        pid: PID,
        tid: PID,
        ts_ns,
        duration_ns: 1000,
        caller: 0x1234,
        site: None,
        stack: None,
        result: 0,
        nested: false,
        partial: false,
        repeat: 1,
        stream: 0,
        op,
    }
}

/// A recording's event stream: `allocs` host allocations, each copied `per_alloc` times (to
/// the GPU and back alternately) and freed, interleaved as a program would.
fn stream(allocs: u64, per_alloc: u64) -> Vec<ApiCall> {
    let mut calls = Vec::with_capacity((allocs * (per_alloc + 2)) as usize);
    let mut ts = 0;
    for i in 0..allocs {
        let addr = 0x7f00_0000_0000 + (i % 4096) * 0x10_0000;
        ts += 1;
        calls.push(call(
            EventKind::HotpinMalloc,
            ts,
            Op::Alloc {
                addr,
                size: 1 << 20,
                space: AllocSpace::Host,
            },
        ));
        for t in 0..per_alloc {
            ts += 1;
            let (dst, src, direction) = if t % 2 == 0 {
                (0xd000_0000, addr + 64, CopyDirection::HostToDevice)
            } else {
                (addr, 0xd000_0000, CopyDirection::DeviceToHost)
            };
            calls.push(call(
                EventKind::CudaMemcpy,
                ts,
                Op::Copy {
                    dst,
                    src,
                    bytes: 4096,
                    direction,
                },
            ));
        }
        ts += 1;
        calls.push(call(
            EventKind::HotpinFree,
            ts,
            Op::Free {
                addr,
                space: AllocSpace::Host,
            },
        ));
    }
    calls
}

/// A history of `n` host allocations from 64 call sites with varied transfer counts.
fn big_history(n: u64) -> MemHistory {
    let mut h = MemHistory::new();
    let sites: Vec<_> = (0..64)
        .map(|i| {
            h.intern_call_site(CallSite {
                module: "/usr/bin/app".into(),
                offset: 0x1000 + i * 16,
                symbol: None,
            })
        })
        .collect();
    for i in 0..n {
        let addr = 0x1000_0000 + i * 0x1000;
        h.alloc(
            PID,
            addr,
            4096,
            AllocKind::Pageable,
            Some(sites[(i % 64) as usize]),
            i,
        );
        for t in 0..(i * 7919 % 5) {
            h.transfer(
                PID,
                0xd000_0000,
                addr,
                4096,
                CopyDirection::HostToDevice,
                i + t,
            );
        }
    }
    h
}

fn ingest(c: &mut Criterion) {
    let calls = stream(10_000, 100);
    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Elements(calls.len() as u64));
    group.bench_function("apply 1.02M events (alloc, 100 copies, free)", |b| {
        b.iter_batched(
            MemHistory::new,
            |mut h| {
                for call in &calls {
                    h.apply(call, None);
                }
                h
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn queries(c: &mut Criterion) {
    let h = big_history(1_000_000);
    let mut group = c.benchmark_group("queries, 1M allocations");
    group.bench_function("hotspots(100)", |b| {
        b.iter(|| black_box(h.hotspots(100).len()))
    });
    group.bench_function("coldspots(100)", |b| {
        b.iter(|| black_box(h.coldspots(100).len()))
    });
    group.bench_function("find(pointer)", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i = (i + 7919) % 1_000_000;
            black_box(h.find(PID, 0x1000_0000 + i * 0x1000 + 100).is_some())
        })
    });
    group.finish();
}

fn dumps(c: &mut Criterion) {
    let h = big_history(1_000_000);
    let n = h.allocations().len() as f64;
    // A summary dump is the history without each allocation's timeline (what `write` does
    // when not verbose).
    let mut summary = h.data().clone();
    for allocation in &mut summary.allocations {
        allocation.events.clear();
    }
    for format in [Format::Binary, Format::Json] {
        for (name, data) in [("summary", &summary), ("verbose", h.data())] {
            let bytes = dump::encode(data, format, name == "verbose").expect("encode");
            eprintln!(
                "size: {format:?} {name} dump of 1M allocations: {} bytes, {:.1} bytes per allocation",
                bytes.len(),
                bytes.len() as f64 / n
            );
        }
    }
    let mut group = c.benchmark_group("dump and load summary, 1M allocations");
    group.sample_size(10);
    for format in [Format::Binary, Format::Json] {
        let bytes = dump::encode(&summary, format, false).expect("encode");
        group.bench_function(format!("encode {format:?}"), |b| {
            b.iter(|| black_box(dump::encode(&summary, format, false).expect("encode").len()))
        });
        group.bench_function(format!("decode {format:?} and rebuild indexes"), |b| {
            b.iter(|| {
                let data = dump::decode(&bytes).expect("decode");
                black_box(
                    MemHistory::from_data(data)
                        .expect("valid")
                        .allocations()
                        .len(),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, ingest, queries, dumps);
criterion_main!(benches);
