//! The daemon's numbers in the Prometheus text format (prometheus-client's encoder): per
//! running program run (program and pid labels), per program over its finished runs
//! (program label), and the tracer's own. Label values are bounded: pids are those running
//! now (the kernel traces at most `MAX_TARGETS` at once), and programs past
//! [`MAX_PROGRAMS`] are counted under `program="other"`.

use std::collections::BTreeMap;

use prometheus_client::{
    encoding::text::encode,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use hotpin_history::history::{AllocKind, MemHistory};
use hotpin_policy::hot::HotPolicy;

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
    /// Of those, the bytes of blocks copied at least once (the rest is pinned and wasted).
    pub pinned_copied_bytes: u64,
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
                if stats.transfers > 0 {
                    traffic.pinned_copied_bytes += allocation.size;
                }
            } else {
                traffic.pageable_bytes += allocation.size;
            }
            if policy.is_hot(allocation) {
                traffic.hot_bytes += allocation.size;
            }
        }
        // Folded allocations (a bounded history) were freed: only their copies count.
        for folded in history.compacted() {
            traffic.h2d_transfers += folded.stats.h2d_count;
            traffic.d2h_transfers += folded.stats.d2h_count;
            traffic.h2d_bytes += folded.stats.h2d_bytes;
            traffic.d2h_bytes += folded.stats.d2h_bytes;
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
    /// Bytes its processes hold in leases from the node's arbiter (auto mode's pins).
    pub leased_bytes: u64,
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

/// Whether a number only grows (a counter, cumulative from the daemon's start) or is a value
/// as things stand (a gauge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One number with its labels: what both the Prometheus text and the OTLP export show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Without the `hotpin_` prefix (and without Prometheus's `_total` for counters).
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub labels: Vec<(&'static str, String)>,
    pub value: u64,
}

/// Every metric, from the running runs, the finished programs and the tracer's own numbers:
/// the one list of what the daemon reports.
pub fn samples(
    running: &[RunningRun],
    finished: &FinishedPrograms,
    tracer: &TracerNumbers,
) -> Vec<Sample> {
    let mut out = Vec::new();
    for run in running {
        run_samples(&mut out, run);
    }
    for (program, totals) in &finished.programs {
        program_samples(&mut out, program, totals);
    }
    tracer_samples(&mut out, tracer, running.len() as u64);
    out
}

/// Pushes one sample.
fn push(
    out: &mut Vec<Sample>,
    name: &'static str,
    help: &'static str,
    kind: Kind,
    labels: Labels,
    value: u64,
) {
    out.push(Sample {
        name,
        help,
        kind,
        labels,
        value,
    });
}

/// A metric family of a running run: the label that tells its values apart ("" for one
/// value), and its values by that label.
struct RunFamily<'a> {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    label: &'static str,
    values: &'a [(&'static str, u64)],
}

/// A running run's copies, host and pinned memory, and device memory.
fn run_samples(out: &mut Vec<Sample>, run: &RunningRun) {
    use Kind::{Counter, Gauge};
    let t = &run.traffic;
    let families = [
        RunFamily {
            name: "transfers",
            help: "Host<->device copies of a running process, by direction",
            kind: Counter,
            label: "direction",
            values: &[("h2d", t.h2d_transfers), ("d2h", t.d2h_transfers)],
        },
        RunFamily {
            name: "transfer_bytes",
            help: "Bytes copied between host and device by a running process, by direction",
            kind: Counter,
            label: "direction",
            values: &[("h2d", t.h2d_bytes), ("d2h", t.d2h_bytes)],
        },
        RunFamily {
            name: "host_memory_bytes",
            help: "Live host memory of a running process: pinned, pageable, and hot (the cost \
             model's judgement, a part of the other two)",
            kind: Gauge,
            label: "memory",
            values: &[
                ("pinned", t.pinned_bytes),
                ("pageable", t.pageable_bytes),
                ("hot", t.hot_bytes),
            ],
        },
        RunFamily {
            name: "pinned_bytes",
            help: "Live pinned host memory of a running process, by who pinned it: hotpin in auto \
             mode, under a lease from the node's arbiter, or the program (its own pins, and \
             any hotpin made without a lease)",
            kind: Gauge,
            label: "by",
            values: &[
                ("lease", run.leased_bytes),
                ("program", t.pinned_bytes.saturating_sub(run.leased_bytes)),
            ],
        },
        RunFamily {
            name: "pinned_copied_bytes",
            help: "Live pinned host memory of a running process, by whether any copy used it \
             (never: pinned and wasted so far)",
            kind: Gauge,
            label: "copied",
            values: &[
                ("yes", t.pinned_copied_bytes),
                ("never", t.pinned_bytes - t.pinned_copied_bytes),
            ],
        },
        RunFamily {
            name: "untracked_bytes",
            help: "Bytes a running process copied from or to host memory in no known allocation",
            kind: Counter,
            label: "",
            values: &[("", t.untracked_bytes)],
        },
        RunFamily {
            name: "device_memory_bytes",
            help: "Device memory of a running process: live and peak",
            kind: Gauge,
            label: "memory",
            values: &[("live", t.device_live_bytes), ("peak", t.device_peak_bytes)],
        },
    ];
    push_families(out, run, &families);
}

/// The samples of a running run's `families`, each labelled with the program and pid.
fn push_families(out: &mut Vec<Sample>, run: &RunningRun, families: &[RunFamily]) {
    for family in families {
        for &(value_label, value) in family.values {
            let mut labels = vec![
                ("program", run.program.clone()),
                ("pid", run.pid.to_string()),
            ];
            if !family.label.is_empty() {
                labels.push((family.label, value_label.to_owned()));
            }
            push(out, family.name, family.help, family.kind, labels, value);
        }
    }
}

/// A program's totals over its finished runs.
fn program_samples(out: &mut Vec<Sample>, program: &str, totals: &ProgramTotals) {
    use Kind::{Counter, Gauge};
    let mut add = |name, help, kind, labels, value| push(out, name, help, kind, labels, value);
    let labels = |more: Option<(&'static str, &'static str)>| {
        let mut labels = vec![("program", program.to_owned())];
        labels.extend(more.map(|(k, v)| (k, v.to_owned())));
        labels
    };
    let t = &totals.traffic;
    add(
        "program_runs",
        "Finished runs of a program whose history was taken",
        Counter,
        labels(None),
        totals.runs,
    );
    for (direction, count, bytes) in [
        ("h2d", t.h2d_transfers, t.h2d_bytes),
        ("d2h", t.d2h_transfers, t.d2h_bytes),
    ] {
        add(
            "program_transfers",
            "Host<->device copies of a program's finished runs, by direction",
            Counter,
            labels(Some(("direction", direction))),
            count,
        );
        add(
            "program_transfer_bytes",
            "Bytes copied between host and device by a program's finished runs, by direction",
            Counter,
            labels(Some(("direction", direction))),
            bytes,
        );
    }
    add(
        "program_untracked_bytes",
        "Bytes a program's finished runs copied in no known allocation",
        Counter,
        labels(None),
        t.untracked_bytes,
    );
    add(
        "program_device_memory_peak_bytes",
        "The highest device memory peak of a program's finished runs",
        Gauge,
        labels(None),
        t.device_peak_bytes,
    );
}

/// The tracer's own numbers.
fn tracer_samples(out: &mut Vec<Sample>, tracer: &TracerNumbers, traced: u64) {
    use Kind::{Counter, Gauge};
    for (name, help, kind, value) in [
        (
            "lost_events",
            "Events the kernel side could not deliver (ring buffer full, arguments unreadable) \
             or that did not decode",
            Counter,
            tracer.lost_events,
        ),
        (
            "events",
            "Events read from the kernel",
            Counter,
            tracer.events,
        ),
        (
            "probes_attached",
            "Probes attached",
            Gauge,
            tracer.probes_attached,
        ),
        (
            "probe_attach_failures",
            "Probes that could not be attached (a symbol missing, a kernel without kprobes)",
            Gauge,
            tracer.probes_unavailable,
        ),
        ("processes_traced", "Program runs traced now", Gauge, traced),
        (
            "histories_written",
            "Histories written to the store",
            Counter,
            tracer.histories_written,
        ),
        (
            "runs_without_calls",
            "Runs that opened a CUDA library but made no CUDA call (not stored)",
            Counter,
            tracer.runs_without_calls,
        ),
        (
            "store_errors",
            "Histories that could not be written to the store",
            Counter,
            tracer.store_errors,
        ),
    ] {
        push(out, name, help, kind, Vec::new(), value);
    }
}

/// The node's pinned-memory figures from the lease arbiter (none when leases are off).
pub fn lease_samples(figures: &crate::daemon::lease::LeaseFigures) -> Vec<Sample> {
    use Kind::{Counter, Gauge};
    let c = &figures.counters;
    [
        (
            "node_pinned_budget_bytes",
            "The node's pinned-memory budget that leases are granted within",
            Gauge,
            figures.budget,
        ),
        (
            "node_pinned_bytes",
            "Pinned host memory counted against the node's budget: leases, and pins outside \
             them that the tracer saw",
            Gauge,
            figures.used,
        ),
        (
            "node_leased_bytes",
            "Pinned host memory granted in leases",
            Gauge,
            figures.granted,
        ),
        (
            "node_pinned_outside_leases_bytes",
            "Pinned host memory the tracer saw that no lease covers (programs' own pins, \
             processes not under hotpin)",
            Gauge,
            figures.outside,
        ),
        (
            "lease_clients",
            "hotpin run processes connected to the arbiter",
            Gauge,
            figures.clients.len() as u64,
        ),
        ("leases_granted", "Leases granted", Counter, c.granted),
        (
            "leases_denied",
            "Leases denied (budget, caps, reclaim under way, distrust)",
            Counter,
            c.denied,
        ),
        (
            "lease_reclaims",
            "Leases asked back from less dense holders",
            Counter,
            c.reclaims,
        ),
        (
            "lease_reclaimed_bytes",
            "Bytes of the leases asked back",
            Counter,
            c.reclaimed_bytes,
        ),
        (
            "lease_clients_distrusted",
            "Clients refused for a claim the socket or the tracer showed false",
            Counter,
            c.distrusted,
        ),
        (
            "lease_messages_refused",
            "Lease messages refused: malformed, oversized, too frequent, out of order",
            Counter,
            c.refused_messages,
        ),
    ]
    .into_iter()
    .map(|(name, help, kind, value)| Sample {
        name,
        help,
        kind,
        labels: Vec::new(),
        value,
    })
    .collect()
}

/// The same samples in Prometheus's classic text format (0.0.4), for scrapers that do not
/// ask for OpenMetrics (curl, `promtool check metrics`): a counter's HELP and TYPE name its
/// `_total` series, and there is no `# EOF`.
pub fn render_classic(samples: &[Sample]) -> String {
    use std::fmt::Write as _;
    let mut families: BTreeMap<String, (&Sample, Vec<&Sample>)> = BTreeMap::new();
    for sample in samples {
        let name = match sample.kind {
            Kind::Counter => format!("hotpin_{}_total", sample.name),
            Kind::Gauge => format!("hotpin_{}", sample.name),
        };
        families
            .entry(name)
            .or_insert((sample, Vec::new()))
            .1
            .push(sample);
    }
    let mut text = String::new();
    for (name, (first, members)) in &families {
        let kind = match first.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let help = first.help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(text, "# HELP {name} {help}.\n# TYPE {name} {kind}");
        for sample in members {
            let labels: Vec<String> = sample
                .labels
                .iter()
                .map(|(key, value)| {
                    let value = value
                        .replace('\\', "\\\\")
                        .replace('"', "\\\"")
                        .replace('\n', "\\n");
                    format!("{key}=\"{value}\"")
                })
                .collect();
            if labels.is_empty() {
                let _ = writeln!(text, "{name} {}", sample.value);
            } else {
                let _ = writeln!(text, "{name}{{{}}} {}", labels.join(","), sample.value);
            }
        }
    }
    text
}

type Labels = Vec<(&'static str, String)>;

/// The samples as Prometheus text (ends with `# EOF`, as OpenMetrics wants).
pub fn render(samples: &[Sample]) -> String {
    let mut registry = Registry::with_prefix("hotpin");
    let mut counters: BTreeMap<&str, Family<Labels, Counter>> = BTreeMap::new();
    let mut gauges: BTreeMap<&str, Family<Labels, Gauge>> = BTreeMap::new();
    for sample in samples {
        match sample.kind {
            Kind::Counter => {
                let family = counters.entry(sample.name).or_insert_with(|| {
                    let family = Family::default();
                    registry.register(sample.name, sample.help, family.clone());
                    family
                });
                family.get_or_create(&sample.labels).inc_by(sample.value);
            }
            Kind::Gauge => {
                let family = gauges.entry(sample.name).or_insert_with(|| {
                    let family = Family::default();
                    registry.register(sample.name, sample.help, family.clone());
                    family
                });
                family
                    .get_or_create(&sample.labels)
                    .set(i64::try_from(sample.value).unwrap_or(i64::MAX));
            }
        }
    }
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
            leased_bytes: 1024,
        }];
        let mut finished = FinishedPrograms::default();
        for i in 0..MAX_PROGRAMS + 5 {
            finished.add(&format!("p{i}"), &traffic);
        }
        let text = render(&samples(&running, &finished, &TracerNumbers::default()));
        assert!(text.contains(
            "hotpin_transfers_total{program=\"app-0123456789ab\",pid=\"42\",direction=\"h2d\"} 3"
        ));
        assert!(text.contains(
            "hotpin_host_memory_bytes{program=\"app-0123456789ab\",pid=\"42\",memory=\"pinned\"} 4096"
        ));
        assert!(text.contains(
            "hotpin_pinned_bytes{program=\"app-0123456789ab\",pid=\"42\",by=\"program\"} 3072"
        ));
        assert!(text.contains(
            "hotpin_pinned_copied_bytes{program=\"app-0123456789ab\",pid=\"42\",copied=\"never\"} 4096"
        ));
        assert!(text.contains("hotpin_program_runs_total{program=\"other\"} 5"));
        assert_eq!(finished.programs.len(), MAX_PROGRAMS + 1);
        assert!(text.trim_end().ends_with("# EOF"));
    }
}
