//! The pinning cost model: pin an allocation when the copy time pinning saves over the
//! program's run is larger than what pinning it costs.
//!
//! Saved time = the bytes copied from and to the allocation x (1 / pageable bandwidth -
//! 1 / pinned bandwidth), by direction and at the copies' size. Pin cost = pinning the block in
//! place (`cudaHostRegister`) plus unpinning it, each a fixed part and a part per byte. The
//! built-in numbers are our H100's (shared/notes/platform.md, 2026-11-22/23); `hotpin
//! calibrate` measures the machine it runs on and writes them to a file the allocator reads.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use hotpin_history::history::TransferStats;

/// Copy sizes at which bandwidths are given; between two, bandwidth is interpolated on the
/// logarithm of the size; outside, the nearest is used.
pub const SIZES: [u64; 6] = [4 << 10, 64 << 10, 1 << 20, 8 << 20, 64 << 20, 1 << 30];

/// A cost in seconds: `fixed + per_gib * bytes / GiB`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Linear {
    pub fixed_s: f64,
    pub per_gib_s: f64,
}

impl Linear {
    pub fn at(&self, bytes: u64) -> f64 {
        self.fixed_s + self.per_gib_s * bytes as f64 / (1u64 << 30) as f64
    }
}

/// Bandwidths in GB/s (1e9 bytes/s) at each of [`SIZES`].
pub type Curve = [f64; SIZES.len()];

/// What copies and pinning cost on one machine.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CostModel {
    pub h2d_pageable: Curve,
    pub h2d_pinned: Curve,
    pub d2h_pageable: Curve,
    pub d2h_pinned: Curve,
    /// `cudaHostRegister` of memory the program already touched.
    pub register: Linear,
    pub unregister: Linear,
}

impl Default for CostModel {
    /// Our H100 (PCIe Gen5 x16, driver 580, CUDA 13), from shared/notes/platform.md: pageable
    /// host-to-device 8.5 GB/s at 1 MiB, 13 at 8 MiB, about 8 at 1 GiB; pinned 37, 52, 55;
    /// device-to-host pageable about 14, pinned 55; cudaHostRegister 0.1 ms at 4 KiB to 24 ms
    /// at 1 GiB (42 ms/GiB measured from PyTorch: the larger is used), cudaHostUnregister 0.14
    /// ms at 1 MiB to 4.8 ms at 256 MiB.
    fn default() -> Self {
        Self {
            h2d_pageable: [1.5, 5.0, 8.5, 13.0, 10.0, 8.0],
            h2d_pinned: [5.0, 20.0, 37.0, 52.0, 55.0, 55.0],
            d2h_pageable: [1.5, 5.0, 10.0, 14.0, 14.0, 14.0],
            d2h_pinned: [5.0, 20.0, 37.0, 52.0, 55.0, 55.0],
            register: Linear {
                fixed_s: 0.1e-3,
                per_gib_s: 42e-3,
            },
            unregister: Linear {
                fixed_s: 0.1e-3,
                per_gib_s: 19e-3,
            },
        }
    }
}

/// The outcome of weighing one allocation (or one recycled group).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Weighing {
    /// Copy time pinning would have saved over the recorded run, in seconds.
    pub saving_s: f64,
    /// What pinning its blocks costs (pin and unpin), in seconds.
    pub cost_s: f64,
}

impl Weighing {
    pub fn pays(&self) -> bool {
        self.saving_s > self.cost_s
    }

    /// Net seconds saved per pinned byte: what the budget admits by.
    pub fn net_per_byte(&self, pinned_bytes: u64) -> f64 {
        (self.saving_s - self.cost_s) / pinned_bytes.max(1) as f64
    }
}

/// Why a cost file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CostFileError {
    #[error("{}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a hotpin cost file", path.display())]
    Format {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: {what}", path.display())]
    Invalid { path: PathBuf, what: String },
}

/// A cost file: the model and where its numbers came from.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CostFile {
    pub format: String,
    /// "hotpin calibrate on <GPU>, <date>".
    pub source: String,
    pub model: CostModel,
}

pub const COST_FILE_FORMAT: &str = "hotpin-costs-1";

impl CostModel {
    /// Seconds one copy of `bytes` takes at the curve's bandwidth.
    fn copy_s(curve: &Curve, bytes: u64) -> f64 {
        bytes as f64 / (bandwidth(curve, bytes) * 1e9)
    }

    /// Seconds one copy of `bytes` of pinned memory takes (`to_device`: host to device).
    pub fn pinned_copy_s(&self, bytes: u64, to_device: bool) -> f64 {
        let curve = if to_device {
            &self.h2d_pinned
        } else {
            &self.d2h_pinned
        };
        Self::copy_s(curve, bytes)
    }

    /// Copy time saved over the recorded run had the memory been pinned, by direction at the
    /// copies' mean size.
    pub fn copy_saving(&self, stats: &TransferStats) -> f64 {
        let saved = |count: u64, bytes: u64, pageable: &Curve, pinned: &Curve| {
            if count == 0 {
                return 0.0;
            }
            let each = bytes / count;
            count as f64 * (Self::copy_s(pageable, each) - Self::copy_s(pinned, each)).max(0.0)
        };
        saved(
            stats.h2d_count,
            stats.h2d_bytes,
            &self.h2d_pageable,
            &self.h2d_pinned,
        ) + saved(
            stats.d2h_count,
            stats.d2h_bytes,
            &self.d2h_pageable,
            &self.d2h_pinned,
        )
    }

    /// What pinning `blocks` blocks of `size` bytes in place costs, pin and unpin.
    pub fn pin_cost(&self, size: u64, blocks: u64) -> f64 {
        blocks as f64 * (self.register.at(size) + self.unregister.at(size))
    }

    /// Weighs pinning `blocks` blocks of `size` bytes that served copies `stats`.
    pub fn weigh(&self, stats: &TransferStats, size: u64, blocks: u64) -> Weighing {
        Weighing {
            saving_s: self.copy_saving(stats),
            cost_s: self.pin_cost(size, blocks.max(1)),
        }
    }

    /// Checks that every number is finite and positive (bandwidths) or not negative (costs).
    pub fn validate(&self) -> Result<(), String> {
        let curves = [
            ("h2d_pageable", &self.h2d_pageable),
            ("h2d_pinned", &self.h2d_pinned),
            ("d2h_pageable", &self.d2h_pageable),
            ("d2h_pinned", &self.d2h_pinned),
        ];
        for (name, curve) in curves {
            if let Some(bad) = curve.iter().find(|v| !v.is_finite() || **v <= 0.0) {
                return Err(format!("{name} has bandwidth {bad}"));
            }
        }
        for (name, cost) in [("register", self.register), ("unregister", self.unregister)] {
            if ![cost.fixed_s, cost.per_gib_s]
                .iter()
                .all(|v| v.is_finite() && *v >= 0.0)
            {
                return Err(format!("{name} cost {cost:?}"));
            }
        }
        Ok(())
    }

    /// Reads a cost file written by `hotpin calibrate`.
    pub fn load(path: &Path) -> Result<CostFile, CostFileError> {
        // A cost file is a few hundred bytes: 1 MiB bounds what a device or a pipe could send.
        let text = hotpin_history::files::read_bounded(path, 1 << 20)
            .and_then(|bytes| {
                String::from_utf8(bytes)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            })
            .map_err(|source| CostFileError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        let file: CostFile =
            serde_json::from_str(&text).map_err(|source| CostFileError::Format {
                path: path.to_path_buf(),
                source,
            })?;
        let invalid = |what: String| CostFileError::Invalid {
            path: path.to_path_buf(),
            what,
        };
        if file.format != COST_FILE_FORMAT {
            return Err(invalid(format!(
                "format {:?}, not {COST_FILE_FORMAT:?}",
                file.format
            )));
        }
        file.model.validate().map_err(invalid)?;
        Ok(file)
    }

    /// Where the allocator looks for a cost file: `$HOTPIN_COSTS`, else
    /// `$XDG_CONFIG_HOME/hotpin/costs.json`, else `~/.config/hotpin/costs.json`.
    pub fn default_path() -> Option<PathBuf> {
        if let Some(path) = std::env::var_os("HOTPIN_COSTS") {
            return Some(PathBuf::from(path));
        }
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        Some(config.join("hotpin/costs.json"))
    }
}

/// Bandwidth of `curve` at a copy of `bytes`, interpolated on log(size).
pub fn bandwidth(curve: &Curve, bytes: u64) -> f64 {
    let x = (bytes.max(1) as f64).ln();
    let at = |i: usize| (SIZES[i] as f64).ln();
    if x <= at(0) {
        return curve[0];
    }
    for i in 1..SIZES.len() {
        if x <= at(i) {
            let t = (x - at(i - 1)) / (at(i) - at(i - 1));
            return curve[i - 1] + t * (curve[i] - curve[i - 1]);
        }
    }
    curve[SIZES.len() - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn copies(h2d: u64, d2h: u64, size: u64) -> TransferStats {
        TransferStats {
            transfers: h2d + d2h,
            h2d_count: h2d,
            d2h_count: d2h,
            h2d_bytes: h2d * size,
            d2h_bytes: d2h * size,
            ..TransferStats::default()
        }
    }

    #[test]
    fn bandwidth_is_exact_at_the_points_and_between_them_in_between() {
        let curve = CostModel::default().h2d_pinned;
        assert_eq!(bandwidth(&curve, 1 << 20), 37.0);
        assert_eq!(bandwidth(&curve, 1), curve[0], "below the first point");
        assert_eq!(bandwidth(&curve, 1 << 40), 55.0, "above the last point");
        let mid = bandwidth(&curve, 3 << 20);
        assert!(37.0 < mid && mid < 52.0, "{mid}");
    }

    #[test]
    fn on_the_h100_one_round_trip_repays_pinning_a_large_buffer_in_place() {
        let model = CostModel::default();
        // 64 MiB there and back: about 11.5 ms pageable vs 2.4 ms pinned; pinning in place
        // and unpinning costs about 4 ms.
        let once = model.weigh(&copies(1, 1, 64 * MIB), 64 * MIB, 1);
        assert!(once.pays(), "{once:?}");
        // Never copied: nothing to save, pinning only costs.
        let never = model.weigh(&copies(0, 0, 64 * MIB), 64 * MIB, 1);
        assert!(!never.pays() && never.saving_s == 0.0, "{never:?}");
        // A 4 KiB buffer copied once: the register call costs more than the copy saves.
        let small = model.weigh(&copies(1, 0, 4 << 10), 4 << 10, 1);
        assert!(!small.pays(), "{small:?}");
    }

    #[test]
    fn more_copies_save_more_and_more_blocks_cost_more() {
        let model = CostModel::default();
        let few = model.weigh(&copies(2, 0, 8 * MIB), 8 * MIB, 1);
        let many = model.weigh(&copies(20, 0, 8 * MIB), 8 * MIB, 1);
        assert!(many.saving_s > 9.0 * few.saving_s);
        assert!(model.pin_cost(8 * MIB, 4) > 3.9 * model.pin_cost(8 * MIB, 1));
        assert!(many.net_per_byte(8 * MIB) > few.net_per_byte(8 * MIB));
    }

    #[test]
    fn a_cost_file_round_trips_and_bad_ones_are_refused_with_the_reason() {
        let dir = std::env::temp_dir().join(format!("hotpin-costs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("costs.json");
        let file = CostFile {
            format: COST_FILE_FORMAT.into(),
            source: "test".into(),
            model: CostModel::default(),
        };
        std::fs::write(&path, serde_json::to_string(&file).unwrap()).unwrap();
        assert_eq!(CostModel::load(&path).unwrap().model, CostModel::default());
        let mut bad = file.clone();
        bad.model.h2d_pinned[2] = 0.0;
        std::fs::write(&path, serde_json::to_string(&bad).unwrap()).unwrap();
        let error = CostModel::load(&path).unwrap_err().to_string();
        assert!(error.contains("h2d_pinned has bandwidth 0"), "{error}");
        std::fs::write(&path, "{not json").unwrap();
        assert!(matches!(
            CostModel::load(&path),
            Err(CostFileError::Format { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
