//! Timelines: a verbose history in the Chrome JSON trace format (the Trace Event Format),
//! which ui.perfetto.dev and chrome://tracing open.
//!
//! Why JSON and not Perfetto's protobuf: both show the same tracks here, the JSON takes no
//! schema or protobuf crate, and any JSON parser checks what was written.
//!
//! What it shows, per traced process:
//! - a track per thread that made copies, each copy an instant on it (direction, bytes, the
//!   stream, the memory it touched);
//! - a track per stream copies were queued on (other than the default stream, or where the
//!   stream is not known: copies read from a descriptor or batch), the same instants;
//! - a track per allocation that has a timeline: one slice for its life (allocation to free,
//!   or to the end of the recording), and an instant for each copy, registration and page
//!   fault.
//!
//! A run of identical copies the kernel counted is one instant with the run's bytes. Copies
//! have no duration here: the driver's copies are probed at entry only.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::{
    history::{AllocEvent, Allocation, MemHistory},
    registry::CopyDirection,
    units::bytes,
};

/// Why a history cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(
        "the history has no timelines (a summary dump): record it with `tracer record --verbose`"
    )]
    NoTimeline,
}

/// The history as a Chrome JSON trace (`{"traceEvents": [...]}`), times in µs from the first
/// event.
pub fn chrome_trace(history: &MemHistory) -> Result<Value, ExportError> {
    let tracked: Vec<&Allocation> = history
        .allocations()
        .iter()
        .filter(|a| !a.events.is_empty())
        .collect();
    if tracked.is_empty() {
        return Err(ExportError::NoTimeline);
    }
    let origin = tracked
        .iter()
        .flat_map(|a| a.events.iter().map(AllocEvent::ts_ns))
        .min()
        .unwrap_or(0);
    let end = tracked
        .iter()
        .flat_map(|a| a.events.iter().map(AllocEvent::ts_ns))
        .max()
        .unwrap_or(origin);
    let us = |ts_ns: u64| ts_ns.saturating_sub(origin) as f64 / 1000.0;
    let command = history.meta().command.join(" ");
    let mut events = Vec::new();
    let mut pids: Vec<u32> = tracked.iter().map(|a| a.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        let name = if command.is_empty() {
            format!("process {pid}")
        } else {
            format!("{command} ({pid})")
        };
        events.push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}));
    }
    let mut threads = BTreeSet::new();
    let mut streams = BTreeMap::new();
    for allocation in tracked {
        let track = (allocation.id % u64::from(ALLOCATION_TRACKS)) as u32;
        let (pid, tid) = (allocation.pid, ALLOCATION_TRACKS + track);
        let name = track_name(history, allocation);
        events.push(json!({
            "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": {"name": name},
        }));
        events.push(json!({
            "ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
            "args": {"sort_index": tid},
        }));
        let born = allocation.alloc_ns.max(origin);
        let died = allocation.free_ns.unwrap_or(end).max(born);
        events.push(json!({
            "ph": "X", "name": format!("{:?}", allocation.kind).to_lowercase(),
            "pid": pid, "tid": tid, "ts": us(born), "dur": us(died) - us(born),
            "args": {"bytes": allocation.size, "address": format!("{:#x}", allocation.start)},
        }));
        for event in &allocation.events {
            let (name, args) = match *event {
                AllocEvent::Transfer {
                    direction,
                    bytes,
                    tid: thread,
                    stream,
                    ts_ns,
                } => {
                    let copy = json!({
                        "bytes": bytes,
                        "stream": format!("{stream:#x}"),
                        "memory": name,
                    });
                    let mut on = |track: u32| {
                        events.push(json!({
                            "ph": "i", "s": "t", "name": direction_name(direction),
                            "pid": pid, "tid": track, "ts": us(ts_ns), "args": copy,
                        }));
                    };
                    if thread != 0 {
                        threads.insert((pid, thread));
                        on(thread);
                    }
                    if stream != 0 {
                        let next = STREAM_TRACKS + streams.len() as u32;
                        let track = *streams.entry((pid, stream)).or_insert(next);
                        on(track);
                    }
                    (
                        direction_name(direction),
                        json!({ "bytes": bytes, "stream": format!("{stream:#x}") }),
                    )
                }
                AllocEvent::PageFault { addr, .. } => {
                    ("page fault", json!({ "address": format!("{addr:#x}") }))
                }
                AllocEvent::Register { .. } => ("registered", json!({})),
                AllocEvent::Unregister { .. } => ("unregistered", json!({})),
                AllocEvent::Alloc { .. } | AllocEvent::Free { .. } => continue,
            };
            events.push(json!({
                "ph": "i", "s": "t", "name": name, "pid": pid, "tid": tid,
                "ts": us(event.ts_ns()), "args": args,
            }));
        }
    }
    for (pid, tid) in threads {
        events.push(json!({
            "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": {"name": format!("thread {tid}")},
        }));
    }
    for ((pid, stream), tid) in streams {
        events.push(json!({
            "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": {"name": format!("stream {stream:#x}")},
        }));
        events.push(json!({
            "ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
            "args": {"sort_index": tid},
        }));
    }
    Ok(json!({ "traceEvents": events, "displayTimeUnit": "ns" }))
}

/// Track ids of streams and allocations, above any thread id (Linux's `pid_max` is at most
/// 2^22) and within the 32 bits viewers read.
const STREAM_TRACKS: u32 = 1 << 29;
const ALLOCATION_TRACKS: u32 = 1 << 30;

fn direction_name(direction: CopyDirection) -> &'static str {
    match direction {
        CopyDirection::HostToDevice => "copy to GPU",
        CopyDirection::DeviceToHost => "copy from GPU",
        _ => "copy",
    }
}

/// "pinned 4.0 MiB #3 at libfoo.so+0x1234 (f)".
fn track_name(history: &MemHistory, allocation: &Allocation) -> String {
    let kind = format!("{:?}", allocation.kind).to_lowercase();
    let site = allocation
        .call_site
        .and_then(|id| history.call_site(id))
        .map(|site| match &site.symbol {
            Some(symbol) => format!(" at {}+{:#x} ({symbol})", site.module, site.offset),
            None => format!(" at {}+{:#x}", site.module, site.offset),
        })
        .unwrap_or_default();
    format!("{kind} {} #{}{site}", bytes(allocation.size), allocation.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_history_is_refused_with_the_way_out() {
        let history = MemHistory::new();
        let error = chrome_trace(&history).expect_err("nothing to show");
        assert!(error.to_string().contains("--verbose"), "{error}");
    }

    #[test]
    fn each_allocation_is_a_track_with_its_life_and_its_copies() {
        let mut history = MemHistory::new();
        history.alloc(
            7,
            0x1000,
            4096,
            crate::history::AllocKind::Pinned,
            None,
            1_000,
        );
        history.transfer(7, 0xd000, 0x1000, 4096, CopyDirection::HostToDevice, 2_000);
        // A run of 5 by thread 42 on stream 0xab.
        let queue = crate::history::Queue {
            tid: 42,
            stream: 0xab,
        };
        history.transfers_on(crate::history::Copies {
            pid: 7,
            dst: 0x1000,
            src: 0xd000,
            bytes: 4096,
            direction: CopyDirection::DeviceToHost,
            ts_ns: 3_000,
            count: 5,
            queue,
        });
        history.free(7, 0x1000, 9_000);
        let trace = chrome_trace(&history).expect("a timeline");
        let events = trace["traceEvents"].as_array().expect("events");
        let of = |ph: &str| events.iter().filter(|e| e["ph"] == ph).count();
        let named = |name: &str| {
            events
                .iter()
                .find(|e| e["name"] == "thread_name" && e["args"]["name"] == name)
                .and_then(|e| e["tid"].as_u64())
        };
        let memory = named("pinned 4.0 KiB #0").expect("the allocation's track");
        let thread = named("thread 42").expect("the thread's track");
        let stream = named("stream 0xab").expect("the stream's track");
        assert_eq!(thread, 42);
        assert!(memory != stream && stream > thread && memory > thread);
        assert_eq!(of("X"), 1, "the allocation's life");
        // Both copies on the allocation's track, the run also on its thread and stream.
        let on = |tid: u64| {
            events
                .iter()
                .filter(|e| e["ph"] == "i" && e["tid"] == tid)
                .count()
        };
        assert_eq!((on(memory), on(thread), on(stream)), (2, 1, 1));
        assert_eq!(of("i"), 4);
        let life = events.iter().find(|e| e["ph"] == "X").expect("life");
        assert_eq!(
            (life["ts"].as_f64(), life["dur"].as_f64()),
            (Some(0.0), Some(8.0))
        );
        let run = events
            .iter()
            .find(|e| e["name"] == "copy from GPU")
            .expect("the run");
        assert_eq!(run["args"]["bytes"], 5 * 4096);
    }
}
