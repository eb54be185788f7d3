//! The modes: how the allocator and the interposer choose what to pin.

/// How the allocator chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Everything pageable (a baseline).
    PinNone,
    /// Everything pinned (a baseline).
    PinAll,
    /// Everything pinned, so transfers are fast while `tracer` records the history.
    Profile,
    /// Pin what the history says was hot.
    Use,
    /// Learn while the program runs which memory its copies make worth pinning (starting
    /// from a history where there is one), and pin that: `hotpin run`'s default. The
    /// interposer's mode only; the Rust allocator has no copy hooks and treats it as `Use`.
    Auto,
}

impl Mode {
    /// The name `from_name` reads (`HOTPIN_MODE`, `--mode`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::PinNone => "pin-none",
            Mode::PinAll => "pin-all",
            Mode::Profile => "profile",
            Mode::Use => "use",
            Mode::Auto => "auto",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "pin-none" => Some(Mode::PinNone),
            "pin-all" => Some(Mode::PinAll),
            "profile" => Some(Mode::Profile),
            "use" => Some(Mode::Use),
            "auto" => Some(Mode::Auto),
            _ => None,
        }
    }
}
