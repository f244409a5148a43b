//! Parses the CLI's durations: `500ms`, `10s`, `2m`, `1h`, or a bare number of seconds.

use std::time::Duration;

/// Parses a duration flag value (clap `value_parser`).
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (like 500ms, 10s, 2m, 1h)"))?;
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    n.checked_mul(ms_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{s:?} is too long"))
}
