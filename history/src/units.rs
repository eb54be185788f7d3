//! Units for people: bytes in binary units, durations, and sizes as people write them.

/// Seconds for people: "12.3 ms", "850 µs", "1.20 s".
pub fn seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

/// Bytes in binary units.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The most seconds a duration on the command line may be: a year, far past any recording,
/// and far inside what `Duration` and `Instant` can add without overflow.
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// Seconds as people write them on a command line (`--duration`, `--checkpoint`,
/// `--fleet-wait`): a finite number from 0 to [`MAX_SECONDS`]. NaN, infinities, negatives
/// and larger numbers are refused with a message (as a clap value parser), never a panic.
pub fn parse_seconds(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !value.is_finite() || !(0.0..=MAX_SECONDS).contains(&value) {
        return Err(format!(
            "{text:?}: give a number of seconds from 0 to {MAX_SECONDS} (a year)"
        ));
    }
    Ok(value)
}

/// Bytes as people write them: a number with an optional K, M or G suffix (powers of 1024).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    // "1GiB", "1GB" and "1G" alike (binary units: K is 1024); "512B" is 512 bytes.
    let unit = text
        .strip_suffix("iB")
        .or_else(|| text.strip_suffix("ib"))
        .or_else(|| {
            text.strip_suffix('B')
                .filter(|t| t.ends_with(|c: char| c.is_ascii_alphabetic()))
        })
        .unwrap_or(text);
    let (digits, shift) = match unit.as_bytes().last() {
        Some(b'K' | b'k') => (&unit[..unit.len() - 1], 10),
        Some(b'M' | b'm') => (&unit[..unit.len() - 1], 20),
        Some(b'G' | b'g') => (&unit[..unit.len() - 1], 30),
        Some(b'T' | b't') => (&unit[..unit.len() - 1], 40),
        Some(b'P' | b'p') => (&unit[..unit.len() - 1], 50),
        Some(b'E' | b'e') => (&unit[..unit.len() - 1], 60),
        Some(b'B' | b'b') => (&unit[..unit.len() - 1], 0),
        _ => (unit, 0),
    };
    if let Ok(value) = digits.parse::<u64>() {
        return value
            .checked_mul(1 << shift)
            .ok_or_else(|| format!("size {text:?} is too large (over 16 EiB)"));
    }
    // A fraction of a unit ("1.5G"), rounded to a whole byte.
    let value: f64 = digits
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0 && shift > 0 && digits.contains('.'))
        .ok_or_else(|| {
            format!("bad size {text:?}: a whole number, or a fraction of K, M, G, T, P or E")
        })?;
    let bytes = (value * (1u64 << shift) as f64).round();
    if bytes >= u64::MAX as f64 {
        return Err(format!("size {text:?} is too large (over 16 EiB)"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_on_a_command_line_are_finite_and_bounded() {
        assert_eq!(parse_seconds("2.5"), Ok(2.5));
        assert_eq!(parse_seconds("0"), Ok(0.0));
        for bad in ["inf", "-inf", "NaN", "1e20", "-1", "ten", ""] {
            assert!(parse_seconds(bad).is_err(), "{bad} was taken");
        }
    }

    #[test]
    fn sizes_take_binary_units_their_ib_and_b_spellings_and_fractions_of_a_unit() {
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("1GB"), Ok(1 << 30));
        assert_eq!(parse_bytes("1.5G"), Ok(3 << 29));
        assert_eq!(parse_bytes("512"), Ok(512));
        assert_eq!(parse_bytes("512B"), Ok(512));
        assert_eq!(parse_bytes("64k"), Ok(64 << 10));
        for bad in ["1.5", "-1G", "G", "", "1e3G", "inf", "NaNG", "1.5X", "20E"] {
            assert!(
                parse_bytes(bad).is_err(),
                "{bad} was taken: {:?}",
                parse_bytes(bad)
            );
        }
    }

    #[test]
    fn byte_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
