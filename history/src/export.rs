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

use hotpin_registry::registry::CopyDirection;

use crate::{
    history::{AllocEvent, Allocation, MemHistory},
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
    let times = || {
        tracked
            .iter()
            .flat_map(|a| a.events.iter().map(AllocEvent::ts_ns))
    };
    let origin = times().min().unwrap_or(0);
    let mut trace = Trace {
        history,
        origin,
        end: times().max().unwrap_or(origin),
        events: Vec::new(),
        threads: BTreeSet::new(),
        streams: BTreeMap::new(),
    };
    trace.processes(&tracked);
    for allocation in tracked {
        trace.allocation(allocation);
    }
    trace.queue_names();
    Ok(json!({ "traceEvents": trace.events, "displayTimeUnit": "ns" }))
}

/// A Chrome trace being built: its events, and the thread and stream tracks copies used.
struct Trace<'h> {
    history: &'h MemHistory,
    origin: u64,
    end: u64,
    events: Vec<Value>,
    threads: BTreeSet<(u32, u32)>,
    streams: BTreeMap<(u32, u64), u32>,
}

impl Trace<'_> {
    /// Microseconds since the first event.
    fn us(&self, ts_ns: u64) -> f64 {
        ts_ns.saturating_sub(self.origin) as f64 / 1000.0
    }

    /// A name for each process.
    fn processes(&mut self, tracked: &[&Allocation]) {
        let command = self.history.meta().command.join(" ");
        let mut pids: Vec<u32> = tracked.iter().map(|a| a.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        for pid in pids {
            let name = if command.is_empty() {
                format!("process {pid}")
            } else {
                format!("{command} ({pid})")
            };
            self.events.push(
                json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}),
            );
        }
    }

    /// An allocation's track: its life as a slice, its copies, registrations and page faults
    /// as instants (copies also on their thread's and stream's tracks).
    fn allocation(&mut self, allocation: &Allocation) {
        let track = (allocation.id % u64::from(ALLOCATION_TRACKS)) as u32;
        let (pid, tid) = (allocation.pid, ALLOCATION_TRACKS + track);
        let name = track_name(self.history, allocation);
        self.events.push(json!({
            "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": {"name": name},
        }));
        self.events.push(json!({
            "ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
            "args": {"sort_index": tid},
        }));
        let born = allocation.alloc_ns.max(self.origin);
        let died = allocation.free_ns.unwrap_or(self.end).max(born);
        let (start, length) = (self.us(born), self.us(died) - self.us(born));
        self.events.push(json!({
            "ph": "X", "name": format!("{:?}", allocation.kind).to_lowercase(),
            "pid": pid, "tid": tid, "ts": start, "dur": length,
            "args": {"bytes": allocation.size, "address": format!("{:#x}", allocation.start)},
        }));
        for event in &allocation.events {
            let (label, args) = match *event {
                AllocEvent::Transfer {
                    direction,
                    bytes,
                    tid: thread,
                    stream,
                    ts_ns,
                } => {
                    self.copy_on_queues(pid, &name, direction, bytes, (thread, stream), ts_ns);
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
            let at = self.us(event.ts_ns());
            self.events.push(json!({
                "ph": "i", "s": "t", "name": label, "pid": pid, "tid": tid,
                "ts": at, "args": args,
            }));
        }
    }

    /// A copy of the allocation `memory`, as an instant on the track of the thread that made
    /// it and of the stream it was queued on (0: not known).
    fn copy_on_queues(
        &mut self,
        pid: u32,
        memory: &str,
        direction: CopyDirection,
        bytes: u64,
        (thread, stream): (u32, u64),
        ts_ns: u64,
    ) {
        let copy = json!({ "bytes": bytes, "stream": format!("{stream:#x}"), "memory": memory });
        let mut tracks = Vec::new();
        if thread != 0 {
            self.threads.insert((pid, thread));
            tracks.push(thread);
        }
        if stream != 0 {
            let next = STREAM_TRACKS + self.streams.len() as u32;
            tracks.push(*self.streams.entry((pid, stream)).or_insert(next));
        }
        let at = self.us(ts_ns);
        for track in tracks {
            self.events.push(json!({
                "ph": "i", "s": "t", "name": direction_name(direction),
                "pid": pid, "tid": track, "ts": at, "args": copy,
            }));
        }
    }

    /// Names for the thread and stream tracks copies used.
    fn queue_names(&mut self) {
        for &(pid, tid) in &self.threads {
            self.events.push(json!({
                "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                "args": {"name": format!("thread {tid}")},
            }));
        }
        for (&(pid, stream), &tid) in &self.streams {
            self.events.push(json!({
                "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                "args": {"name": format!("stream {stream:#x}")},
            }));
            self.events.push(json!({
                "ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                "args": {"sort_index": tid},
            }));
        }
    }
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
