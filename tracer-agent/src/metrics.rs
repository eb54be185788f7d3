//! The daemon's numbers in the Prometheus text format (prometheus-client's encoder): per
//! running program run (program and pid labels), per program over its finished runs
//! (program label), and the tracer's own. Label values are bounded: pids are those running
//! now (the kernel traces at most `MAX_TARGETS` at once), and programs past
//! [`MAX_PROGRAMS`] are counted under `program="other"`.

use std::collections::BTreeMap;

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use crate::{
    history::{AllocKind, MemHistory},
    report::HotPolicy,
};

/// Programs with a label of their own; the rest share `program="other"`.
pub const MAX_PROGRAMS: usize = 256;

/// What one history says, as the metrics show it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub h2d_transfers: u64,
    pub d2h_transfers: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
    /// Bytes of live pinned (page-locked or registered) host memory.
    pub pinned_bytes: u64,
    /// Bytes of live pageable host memory (allocations, mappings, heap).
    pub pageable_bytes: u64,
    /// Bytes of live host memory the cost model judges hot.
    pub hot_bytes: u64,
    /// Bytes copied from or to host memory in no known allocation.
    pub untracked_bytes: u64,
    pub device_live_bytes: u64,
    pub device_peak_bytes: u64,
}

impl Traffic {
    pub fn of(history: &MemHistory, policy: &HotPolicy) -> Self {
        let mut traffic = Traffic::default();
        for allocation in history.allocations() {
            let stats = &allocation.stats;
            traffic.h2d_transfers += stats.h2d_count;
            traffic.d2h_transfers += stats.d2h_count;
            traffic.h2d_bytes += stats.h2d_bytes;
            traffic.d2h_bytes += stats.d2h_bytes;
            if allocation.kind == AllocKind::Untracked {
                traffic.untracked_bytes += stats.h2d_bytes + stats.d2h_bytes + stats.other_bytes;
                continue;
            }
            if !allocation.is_live() || allocation.kind.is_device() {
                continue;
            }
            if allocation.kind.is_pinned() {
                traffic.pinned_bytes += allocation.size;
            } else {
                traffic.pageable_bytes += allocation.size;
            }
            if policy.is_hot(allocation) {
                traffic.hot_bytes += allocation.size;
            }
        }
        for memory in history.stats().device_memory.values() {
            traffic.device_live_bytes += memory.live_bytes;
            traffic.device_peak_bytes = traffic.device_peak_bytes.max(memory.peak_bytes);
        }
        traffic
    }

    fn add_finished(&mut self, run: &Traffic) {
        self.h2d_transfers += run.h2d_transfers;
        self.d2h_transfers += run.d2h_transfers;
        self.h2d_bytes += run.h2d_bytes;
        self.d2h_bytes += run.d2h_bytes;
        self.untracked_bytes += run.untracked_bytes;
        self.device_peak_bytes = self.device_peak_bytes.max(run.device_peak_bytes);
    }
}

/// A running program run.
#[derive(Clone, Debug)]
pub struct RunningRun {
    pub program: String,
    pub pid: u32,
    pub traffic: Traffic,
}

/// Totals of a program's finished runs.
#[derive(Clone, Debug, Default)]
pub struct ProgramTotals {
    pub runs: u64,
    pub traffic: Traffic,
}

/// The tracer's own numbers.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracerNumbers {
    /// Events the kernel side could not deliver, and records that did not decode.
    pub lost_events: u64,
    pub events: u64,
    /// Probes that could not be attached.
    pub probes_unavailable: u64,
    pub probes_attached: u64,
    pub histories_written: u64,
    /// Runs that opened a CUDA library but made no CUDA call: not stored.
    pub runs_without_calls: u64,
    pub store_errors: u64,
}

/// Finished runs per program, bounded to [`MAX_PROGRAMS`] labels.
#[derive(Debug, Default)]
pub struct FinishedPrograms {
    programs: BTreeMap<String, ProgramTotals>,
}

impl FinishedPrograms {
    pub fn add(&mut self, program: &str, traffic: &Traffic) {
        let key = if self.programs.contains_key(program) || self.programs.len() < MAX_PROGRAMS {
            program
        } else {
            "other"
        };
        let totals = self.programs.entry(key.to_owned()).or_default();
        totals.runs += 1;
        totals.traffic.add_finished(traffic);
    }

    pub fn get(&self, program: &str) -> Option<&ProgramTotals> {
        self.programs.get(program)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    program: String,
    pid: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunDirection {
    program: String,
    pid: String,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunMemory {
    program: String,
    pid: String,
    memory: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProgramLabels {
    program: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProgramDirection {
    program: String,
    direction: &'static str,
}

fn counter<L>(registry: &mut Registry, name: &str, help: &str) -> Family<L, Counter>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    let family = Family::<L, Counter>::default();
    registry.register(name, help, family.clone());
    family
}

fn gauge<L>(registry: &mut Registry, name: &str, help: &str) -> Family<L, Gauge>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    let family = Family::<L, Gauge>::default();
    registry.register(name, help, family.clone());
    family
}

fn as_gauge(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The metrics as Prometheus text (ends with `# EOF`, as OpenMetrics wants).
pub fn render(
    running: &[RunningRun],
    finished: &FinishedPrograms,
    tracer: &TracerNumbers,
) -> String {
    let mut registry = Registry::with_prefix("hotpin");
    let transfers = counter::<RunDirection>(
        &mut registry,
        "transfers",
        "Host<->device copies of a running process, by direction",
    );
    let transfer_bytes = counter::<RunDirection>(
        &mut registry,
        "transfer_bytes",
        "Bytes copied between host and device by a running process, by direction",
    );
    let host_memory = gauge::<RunMemory>(
        &mut registry,
        "host_memory_bytes",
        "Live host memory of a running process: pinned, pageable, and hot (the cost model's \
         judgement, a part of the other two)",
    );
    let untracked = counter::<RunLabels>(
        &mut registry,
        "untracked_bytes",
        "Bytes a running process copied from or to host memory in no known allocation",
    );
    let device = gauge::<RunMemory>(
        &mut registry,
        "device_memory_bytes",
        "Device memory of a running process: live and peak",
    );
    for run in running {
        let pid = run.pid.to_string();
        let t = &run.traffic;
        for (direction, count, bytes) in [
            ("h2d", t.h2d_transfers, t.h2d_bytes),
            ("d2h", t.d2h_transfers, t.d2h_bytes),
        ] {
            let labels = RunDirection {
                program: run.program.clone(),
                pid: pid.clone(),
                direction,
            };
            transfers.get_or_create(&labels).inc_by(count);
            transfer_bytes.get_or_create(&labels).inc_by(bytes);
        }
        for (memory, value, family) in [
            ("pinned", t.pinned_bytes, &host_memory),
            ("pageable", t.pageable_bytes, &host_memory),
            ("hot", t.hot_bytes, &host_memory),
            ("live", t.device_live_bytes, &device),
            ("peak", t.device_peak_bytes, &device),
        ] {
            let labels = RunMemory {
                program: run.program.clone(),
                pid: pid.clone(),
                memory,
            };
            family.get_or_create(&labels).set(as_gauge(value));
        }
        untracked
            .get_or_create(&RunLabels {
                program: run.program.clone(),
                pid,
            })
            .inc_by(t.untracked_bytes);
    }

    let runs = counter::<ProgramLabels>(
        &mut registry,
        "program_runs",
        "Finished runs of a program whose history was taken",
    );
    let program_transfers = counter::<ProgramDirection>(
        &mut registry,
        "program_transfers",
        "Host<->device copies of a program's finished runs, by direction",
    );
    let program_bytes = counter::<ProgramDirection>(
        &mut registry,
        "program_transfer_bytes",
        "Bytes copied between host and device by a program's finished runs, by direction",
    );
    let program_untracked = counter::<ProgramLabels>(
        &mut registry,
        "program_untracked_bytes",
        "Bytes a program's finished runs copied in no known allocation",
    );
    let program_device_peak = gauge::<ProgramLabels>(
        &mut registry,
        "program_device_memory_peak_bytes",
        "The highest device memory peak of a program's finished runs",
    );
    for (program, totals) in &finished.programs {
        let labels = ProgramLabels {
            program: program.clone(),
        };
        runs.get_or_create(&labels).inc_by(totals.runs);
        let t = &totals.traffic;
        program_untracked
            .get_or_create(&labels)
            .inc_by(t.untracked_bytes);
        program_device_peak
            .get_or_create(&labels)
            .set(as_gauge(t.device_peak_bytes));
        for (direction, count, bytes) in [
            ("h2d", t.h2d_transfers, t.h2d_bytes),
            ("d2h", t.d2h_transfers, t.d2h_bytes),
        ] {
            let labels = ProgramDirection {
                program: program.clone(),
                direction,
            };
            program_transfers.get_or_create(&labels).inc_by(count);
            program_bytes.get_or_create(&labels).inc_by(bytes);
        }
    }

    let plain_counter = |registry: &mut Registry, name: &str, help: &str, value: u64| {
        let metric = Counter::<u64>::default();
        metric.inc_by(value);
        registry.register(name, help, metric);
    };
    let plain_gauge = |registry: &mut Registry, name: &str, help: &str, value: u64| {
        let metric = Gauge::<i64>::default();
        metric.set(as_gauge(value));
        registry.register(name, help, metric);
    };
    plain_counter(
        &mut registry,
        "lost_events",
        "Events the kernel side could not deliver (ring buffer full) or that did not decode",
        tracer.lost_events,
    );
    plain_counter(
        &mut registry,
        "events",
        "Events read from the kernel",
        tracer.events,
    );
    plain_gauge(
        &mut registry,
        "probes_attached",
        "Probes attached",
        tracer.probes_attached,
    );
    plain_gauge(
        &mut registry,
        "probe_attach_failures",
        "Probes that could not be attached (a symbol missing, a kernel without kprobes)",
        tracer.probes_unavailable,
    );
    plain_gauge(
        &mut registry,
        "processes_traced",
        "Program runs traced now",
        running.len() as u64,
    );
    plain_counter(
        &mut registry,
        "histories_written",
        "Histories written to the store",
        tracer.histories_written,
    );
    plain_counter(
        &mut registry,
        "runs_without_calls",
        "Runs that opened a CUDA library but made no CUDA call (not stored)",
        tracer.runs_without_calls,
    );
    plain_counter(
        &mut registry,
        "store_errors",
        "Histories that could not be written to the store",
        tracer.store_errors,
    );
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String does not fail");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_carries_each_run_and_program_and_bounds_programs() {
        let traffic = Traffic {
            h2d_transfers: 3,
            d2h_transfers: 2,
            h2d_bytes: 300,
            d2h_bytes: 200,
            pinned_bytes: 4096,
            ..Traffic::default()
        };
        let running = [RunningRun {
            program: "app-0123456789ab".into(),
            pid: 42,
            traffic,
        }];
        let mut finished = FinishedPrograms::default();
        for i in 0..MAX_PROGRAMS + 5 {
            finished.add(&format!("p{i}"), &traffic);
        }
        let text = render(&running, &finished, &TracerNumbers::default());
        assert!(text.contains(
            "hotpin_transfers_total{program=\"app-0123456789ab\",pid=\"42\",direction=\"h2d\"} 3"
        ));
        assert!(text.contains(
            "hotpin_host_memory_bytes{program=\"app-0123456789ab\",pid=\"42\",memory=\"pinned\"} 4096"
        ));
        assert!(text.contains("hotpin_program_runs_total{program=\"other\"} 5"));
        assert_eq!(finished.programs.len(), MAX_PROGRAMS + 1);
        assert!(text.trim_end().ends_with("# EOF"));
    }
}
