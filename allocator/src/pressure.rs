//! Memory pressure from MemAvailable, with hysteresis so the level does not flap.

use std::time::{Duration, Instant};

/// How short of memory the machine is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Normal,
    /// New pins only for allocations the history says to pin; cached blocks are released.
    High,
    /// No new pins at all.
    Critical,
}

/// Thresholds as shares of MemTotal available: enter a level below `enter`, leave it above
/// `leave`.
const HIGH: (f64, f64) = (0.10, 0.15);
const CRITICAL: (f64, f64) = (0.05, 0.08);
/// /proc/meminfo is read at most this often.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct Pressure {
    level: Level,
    sampled: Option<Instant>,
}

impl Default for Pressure {
    fn default() -> Self {
        Self {
            level: Level::Normal,
            sampled: None,
        }
    }
}

/// MemAvailable / MemTotal, from /proc/meminfo (or the file `HOTPIN_MEMINFO` names, which
/// tests use to stage a shortage).
fn available_share() -> Option<f64> {
    let path = std::env::var_os("HOTPIN_MEMINFO").unwrap_or_else(|| "/proc/meminfo".into());
    let text = std::fs::read_to_string(path).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some(field("MemAvailable:")? / field("MemTotal:")?)
}

impl Pressure {
    /// The level now (re-sampled at most every 100 ms).
    pub fn level(&mut self) -> Level {
        if self.sampled.is_none_or(|at| at.elapsed() >= SAMPLE_EVERY) {
            self.sampled = Some(Instant::now());
            if let Some(share) = available_share() {
                self.level = next_level(self.level, share);
            }
        }
        self.level
    }
}

/// The level after seeing `share` of memory available, starting from `level`.
pub fn next_level(level: Level, share: f64) -> Level {
    if share < CRITICAL.0 || (level == Level::Critical && share < CRITICAL.1) {
        Level::Critical
    } else if share < HIGH.0 || (level >= Level::High && share < HIGH.1) {
        Level::High
    } else {
        Level::Normal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_have_hysteresis() {
        let mut level = Level::Normal;
        for (share, expected) in [
            (0.50, Level::Normal),
            (0.09, Level::High),
            (0.12, Level::High),
            (0.16, Level::Normal),
            (0.04, Level::Critical),
            (0.07, Level::Critical),
            (0.09, Level::High),
            (0.20, Level::Normal),
        ] {
            level = next_level(level, share);
            assert_eq!(level, expected, "at {share}");
        }
    }
}
