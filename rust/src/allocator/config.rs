//! Allocator configuration from the environment.

/// Number of foo devices when `FOO_RS_DEVICE_COUNT` is unset.
pub const DEFAULT_DEVICE_COUNT: usize = 2;
/// Capacity of each foo device when `FOO_RS_DEVICE_MEMORY` is unset: 8 GiB.
pub const DEFAULT_DEVICE_MEMORY: usize = 8 << 30;

/// How many foo devices exist and how much memory each may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Number of foo devices (`FOO_RS_DEVICE_COUNT`, 1..=64).
    pub device_count: usize,
    /// Total memory of each device in bytes (`FOO_RS_DEVICE_MEMORY`).
    pub device_memory: usize,
}

impl Config {
    /// Reads `FOO_RS_DEVICE_COUNT` and `FOO_RS_DEVICE_MEMORY`; unparsable
    /// values fall back to the defaults with a message on stderr.
    pub fn from_env() -> Config {
        let device_count = match std::env::var("FOO_RS_DEVICE_COUNT") {
            Ok(v) => match v.trim().parse::<usize>() {
                Ok(n) if (1..=64).contains(&n) => n,
                _ => {
                    eprintln!(
                        "foo_rs: ignoring FOO_RS_DEVICE_COUNT={v:?} (expected 1..=64); using {DEFAULT_DEVICE_COUNT}"
                    );
                    DEFAULT_DEVICE_COUNT
                }
            },
            Err(_) => DEFAULT_DEVICE_COUNT,
        };
        let device_memory = match std::env::var("FOO_RS_DEVICE_MEMORY") {
            Ok(v) => parse_memory_size(&v).unwrap_or_else(|e| {
                eprintln!("foo_rs: ignoring FOO_RS_DEVICE_MEMORY={v:?} ({e}); using 8GiB");
                DEFAULT_DEVICE_MEMORY
            }),
            Err(_) => DEFAULT_DEVICE_MEMORY,
        };
        Config {
            device_count,
            device_memory,
        }
    }
}

/// Parses a byte count: a plain integer, or a number with a unit suffix
/// (`K`, `M`, `G`, `T`, optionally followed by `B` or `iB`; powers of 1024).
pub fn parse_memory_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("not a size: {s:?}"))?;
    let unit = unit.trim().to_ascii_uppercase();
    let mult: f64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
        "" => 1.0,
        "K" => 1024.0,
        "M" => 1024.0 * 1024.0,
        "G" => 1024.0 * 1024.0 * 1024.0,
        "T" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("unknown unit in {s:?}")),
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes < 0.0 || bytes > usize::MAX as f64 {
        return Err(format!("size out of range: {s:?}"));
    }
    Ok(bytes as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_memory_size("1024"), Ok(1024));
        assert_eq!(parse_memory_size("4K"), Ok(4096));
        assert_eq!(parse_memory_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_memory_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_memory_size(" 8gb "), Ok(8 << 30));
        assert!(parse_memory_size("lots").is_err());
        assert!(parse_memory_size("5X").is_err());
    }
}
