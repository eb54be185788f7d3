//! The interposer's settings from the environment (`hotpin run` hands its flags down as
//! `HOTPIN_*` variables): each read once at load, a value that cannot be used said once per
//! run with its default kept, or, in strict mode, the process stopped before the program
//! starts.

/// Exit status of strict mode (`HOTPIN_STRICT=1`, `hotpin run --strict`) for a setting the
/// interposer cannot use, and for a use-mode history that matched none of the program's
/// allocations: 125, what `env`, `timeout` and `chroot` give when they, not the command,
/// failed, so it is not taken for the program's own 2 or 3 (#41 item 13); stderr says which.
pub(crate) const STRICT_FAILED: i32 = 125;

/// Whether what would only be said is to be an error (`HOTPIN_STRICT=1`).
pub(crate) fn strict() -> bool {
    std::env::var_os("HOTPIN_STRICT").is_some_and(|v| v == "1")
}

/// A size in the environment variable `name` (suffixes K, M, G), else `default`.
pub(crate) fn size_setting(name: &str, default: usize) -> usize {
    setting(
        name,
        default,
        |text| {
            hotpin_history::units::parse_bytes(text)
                .map(|bytes| bytes as usize)
                .map_err(|error| format!("is not a size ({error})"))
        },
        |default| format!("{default} bytes"),
    )
}

/// A switch in the environment variable `name` (`1` on, `0` off), else `default`.
pub(crate) fn switch_setting(name: &str, default: bool) -> bool {
    setting(
        name,
        default,
        |text| match text {
            "1" => Ok(true),
            "0" => Ok(false),
            _ => Err("is neither 1 nor 0".to_owned()),
        },
        |default| u8::from(*default).to_string(),
    )
}

/// The environment variable `name` read by `parse`, else `default`; a value `parse` refuses
/// (saying what is wrong with it) is said once, with the default kept (`shown`), or in strict
/// mode the process stops before the program starts.
fn setting<T>(
    name: &str,
    default: T,
    parse: impl FnOnce(&str) -> Result<T, String>,
    shown: impl FnOnce(&T) -> String,
) -> T {
    let Ok(text) = std::env::var(name) else {
        return default;
    };
    match parse(&text) {
        Ok(value) => value,
        Err(wrong) if strict() => {
            eprintln!("hotpin: {name}={text:?} {wrong}; stopping (HOTPIN_STRICT)");
            // SAFETY: ends the process before the program starts.
            unsafe { libc::_exit(STRICT_FAILED) };
        }
        Err(wrong) => {
            say_once(&format!(
                "hotpin: {name}={text:?} {wrong}; it is {}",
                shown(&default)
            ));
            default
        }
    }
}

/// Says `text` on stderr once per run, not once per process (#41 item 13: a missing cost file
/// was said 6 times for one `sh -c` pipeline): what was said is marked in the environment
/// (`HOTPIN_SAID`, a short hash of each text) that the run's later processes inherit. Called
/// at load, before the program's `main`, while it has one thread.
pub(crate) fn say_once(text: &str) {
    let key = format!(
        "{:x}",
        text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
    );
    let said = std::env::var("HOTPIN_SAID").unwrap_or_default();
    if said.split(',').any(|k| k == key) {
        return;
    }
    eprintln!("{text}");
    let marked = if said.is_empty() {
        key
    } else {
        format!("{said},{key}")
    };
    // SAFETY: at load, before the program's main: no other thread reads the environment.
    unsafe { std::env::set_var("HOTPIN_SAID", marked) };
}
