//! CPU lists (`"0-3,8"`, as in sysfs and kubelet flags) and OVS/DPDK hex masks.

use std::collections::BTreeSet;

/// A bad cpulist or mask, with the offending text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {text:?}: {detail}")]
pub struct CpuListError {
    pub what: &'static str,
    pub text: String,
    pub detail: String,
}

/// Parses a cpulist (`"0-3,8,10-11"`; empty = no CPU).
pub fn parse_list(text: &str) -> Result<BTreeSet<u32>, CpuListError> {
    let err = |detail: String| CpuListError {
        what: "cpulist",
        text: text.to_string(),
        detail,
    };
    let mut out = BTreeSet::new();
    for part in text
        .trim()
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let num = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| err(format!("{s:?} is not a CPU number")))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(err(format!("range {part} is reversed")));
                }
                if b - a > 4096 {
                    return Err(err(format!("range {part} is too large")));
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(num(part)?);
            }
        }
    }
    Ok(out)
}

/// Formats a set as a cpulist with ranges.
pub fn format_list(cpus: &BTreeSet<u32>) -> String {
    let mut parts = Vec::new();
    let mut it = cpus.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// The hex mask OVS wants (`pmd-cpu-mask`, `dpdk-lcore-mask`): `0x6` for CPUs 1 and 2.
pub fn to_mask(cpus: &BTreeSet<u32>) -> String {
    let Some(&max) = cpus.iter().next_back() else {
        return "0x0".into();
    };
    // nibbles, most significant first
    let nibbles = max / 4 + 1;
    let mut s = String::from("0x");
    let mut leading = true;
    for n in (0..nibbles).rev() {
        let v: u32 = (0..4)
            .filter(|b| cpus.contains(&(n * 4 + b)))
            .map(|b| 1 << b)
            .sum();
        if leading && v == 0 && n != 0 {
            continue;
        }
        leading = false;
        s.push(char::from_digit(v, 16).unwrap_or('0'));
    }
    s
}

/// The bitmap format of sysfs CPU masks (`rps_cpus`, `xps_cpus`): hex words of 32 CPUs,
/// most significant first, separated by commas, no `0x` (`"00000001,00000004"` for CPUs
/// 2 and 32).
pub fn to_sysfs_mask(cpus: &BTreeSet<u32>) -> String {
    let words = cpus.iter().next_back().map_or(1, |&max| max / 32 + 1);
    (0..words)
        .rev()
        .map(|w| {
            let v: u32 = cpus
                .iter()
                .filter(|&&c| c / 32 == w)
                .map(|&c| 1u32 << (c % 32))
                .sum();
            format!("{v:08x}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses a hex mask (`0x6`, `6`) into CPUs.
pub fn from_mask(text: &str) -> Result<BTreeSet<u32>, CpuListError> {
    let t = text.trim();
    let hex = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if hex.is_empty() {
        return Err(CpuListError {
            what: "CPU mask",
            text: text.into(),
            detail: "empty".into(),
        });
    }
    let mut out = BTreeSet::new();
    for (i, c) in hex.chars().rev().enumerate() {
        let v = c.to_digit(16).ok_or_else(|| CpuListError {
            what: "CPU mask",
            text: text.into(),
            detail: format!("{c:?} is not a hex digit"),
        })?;
        for b in 0..4 {
            if v & (1 << b) != 0 {
                out.insert(i as u32 * 4 + b);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_round_trip() {
        let s = parse_list("0-3, 8,10-11").unwrap();
        assert_eq!(
            s.iter().copied().collect::<Vec<_>>(),
            [0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(format_list(&s), "0-3,8,10-11");
        assert!(parse_list("").unwrap().is_empty());
        assert!(parse_list("3-1").unwrap_err().detail.contains("reversed"));
        assert!(parse_list("a").unwrap_err().to_string().contains("\"a\""));
    }

    #[test]
    fn masks() {
        assert_eq!(to_mask(&[1].into()), "0x2");
        assert_eq!(to_mask(&[0].into()), "0x1");
        assert_eq!(to_mask(&[1, 2].into()), "0x6");
        assert_eq!(to_mask(&[4, 12].into()), "0x1010");
        assert_eq!(to_mask(&BTreeSet::new()), "0x0");
        assert_eq!(from_mask("0x1010").unwrap(), [4, 12].into());
        assert_eq!(from_mask("6").unwrap(), [1, 2].into());
        assert!(from_mask("0xg").is_err());
        for set in [vec![0u32], vec![1, 5, 9], vec![63], vec![2, 3, 4, 5, 6, 7]] {
            let s: BTreeSet<u32> = set.into_iter().collect();
            assert_eq!(from_mask(&to_mask(&s)).unwrap(), s);
        }
    }

    #[test]
    fn sysfs_masks_are_32_bit_words() {
        assert_eq!(to_sysfs_mask(&[0].into()), "00000001");
        assert_eq!(to_sysfs_mask(&[0, 2, 3].into()), "0000000d");
        assert_eq!(to_sysfs_mask(&[31].into()), "80000000");
        assert_eq!(to_sysfs_mask(&[2, 32].into()), "00000001,00000004");
        assert_eq!(to_sysfs_mask(&[64].into()), "00000001,00000000,00000000");
        assert_eq!(to_sysfs_mask(&BTreeSet::new()), "00000000");
    }
}
