//! A set of `u128` values stored as sorted, disjoint, non-adjacent inclusive ranges.
//!
//! IPAM keeps each family's free space in one of these (IPv4 addresses widened from
//! `u32`), so memory grows with the number of *fragments* — at most one per allocation
//! or exclusion — never with the size of the address space: an untouched IPv6 /64 is a
//! single range.
//!
//! Ranges are keyed by their **end** (`end → start`): "the first member at or after `x`"
//! is then one ordered lookup, `range(x..).next()`, and taking the first address of a
//! range (the sequential-allocation case) rewrites the value in place.

use std::collections::BTreeMap;

/// Sorted disjoint inclusive ranges of `u128`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// `end → start`, with `start <= end`; neighbouring ranges are never adjacent.
    by_end: BTreeMap<u128, u128>,
}

impl RangeSet {
    /// The empty set.
    pub fn new() -> Self {
        RangeSet::default()
    }

    /// The set holding `start..=end` (empty if `start > end`).
    pub fn from_range(start: u128, end: u128) -> Self {
        let mut s = RangeSet::new();
        s.insert_range(start, end);
        s
    }

    /// True when the set has no member.
    pub fn is_empty(&self) -> bool {
        self.by_end.is_empty()
    }

    /// How many ranges (fragments) the set is made of: its memory footprint.
    pub fn range_count(&self) -> usize {
        self.by_end.len()
    }

    /// The ranges in ascending order, as inclusive `(start, end)` pairs.
    pub fn ranges(&self) -> impl Iterator<Item = (u128, u128)> + '_ {
        self.by_end.iter().map(|(&end, &start)| (start, end))
    }

    /// Number of members; saturates at `u128::MAX` (only the full 2^128 space overflows).
    pub fn len(&self) -> u128 {
        self.ranges()
            .fold(0u128, |n, (s, e)| n.saturating_add(e - s).saturating_add(1))
    }

    /// Number of members inside `start..=end`.
    pub fn count_within(&self, start: u128, end: u128) -> u128 {
        if start > end {
            return 0;
        }
        self.by_end
            .range(start..)
            .map(|(&e, &s)| (s, e))
            .take_while(|&(s, _)| s <= end)
            .fold(0u128, |n, (s, e)| {
                let (s, e) = (s.max(start), e.min(end));
                n.saturating_add(e - s).saturating_add(1)
            })
    }

    /// True when `x` is a member.
    pub fn contains(&self, x: u128) -> bool {
        self.by_end
            .range(x..)
            .next()
            .is_some_and(|(_, &start)| start <= x)
    }

    /// The smallest member `>= x`.
    pub fn first_at_or_after(&self, x: u128) -> Option<u128> {
        self.by_end
            .range(x..)
            .next()
            .map(|(_, &start)| start.max(x))
    }

    /// The smallest member.
    pub fn first(&self) -> Option<u128> {
        self.by_end.values().next().copied()
    }

    /// Adds `x`; returns true when it was not a member.
    pub fn insert(&mut self, x: u128) -> bool {
        if self.contains(x) {
            return false;
        }
        self.insert_range(x, x);
        true
    }

    /// Adds every value of `start..=end` (no-op if `start > end`), merging neighbours.
    pub fn insert_range(&mut self, start: u128, end: u128) {
        if start > end {
            return;
        }
        let (mut new_start, mut new_end) = (start, end);
        // Every range ending at or after `start - 1` and starting at or before `end + 1`
        // overlaps or touches the new one: fold it in.
        let lo = start.saturating_sub(1);
        while let Some((&e, &s)) = self.by_end.range(lo..).next() {
            if end != u128::MAX && s > end + 1 {
                break;
            }
            self.by_end.remove(&e);
            new_start = new_start.min(s);
            new_end = new_end.max(e);
        }
        self.by_end.insert(new_end, new_start);
    }

    /// Removes `x`; returns true when it was a member.
    pub fn remove(&mut self, x: u128) -> bool {
        let Some((&end, start)) = self.by_end.range_mut(x..).next() else {
            return false;
        };
        let s = *start;
        if s > x {
            return false;
        }
        if s == end {
            self.by_end.remove(&end);
        } else if x == s {
            // s < end, so no overflow
            *start = x + 1;
        } else if x == end {
            // x > s, so no underflow
            self.by_end.remove(&end);
            self.by_end.insert(x - 1, s);
        } else {
            *start = x + 1;
            self.by_end.insert(x - 1, s);
        }
        true
    }

    /// Removes every value of `start..=end` (no-op if `start > end`).
    pub fn remove_range(&mut self, start: u128, end: u128) {
        if start > end {
            return;
        }
        while let Some((&e, &s)) = self.by_end.range(start..).next() {
            if s > end {
                break;
            }
            self.by_end.remove(&e);
            if s < start {
                self.by_end.insert(start - 1, s);
            }
            if e > end {
                self.by_end.insert(e, end + 1);
                // the right piece starts past `end`: nothing further overlaps
                break;
            }
        }
    }

    /// Approximate heap bytes: B-tree leaves hold up to 11 `(u128, u128)` entries.
    pub fn heap_bytes_estimate(&self) -> usize {
        const LEAF: usize = 11 * 32 + 16;
        self.by_end.len().div_ceil(11) * LEAF
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn insert_merges_neighbours() {
        let mut s = RangeSet::new();
        s.insert_range(10, 12);
        s.insert_range(14, 16);
        assert_eq!(s.range_count(), 2);
        assert!(s.insert(13));
        assert_eq!(s.ranges().collect::<Vec<_>>(), vec![(10, 16)]);
        assert!(!s.insert(13));
        assert_eq!(s.len(), 7);
    }

    #[test]
    fn remove_splits() {
        let mut s = RangeSet::from_range(0, 9);
        assert!(s.remove(0));
        assert!(s.remove(9));
        assert!(s.remove(5));
        assert!(!s.remove(5));
        assert_eq!(s.ranges().collect::<Vec<_>>(), vec![(1, 4), (6, 8)]);
        s.remove_range(3, 7);
        assert_eq!(s.ranges().collect::<Vec<_>>(), vec![(1, 2), (8, 8)]);
        assert_eq!(s.first_at_or_after(3), Some(8));
        assert_eq!(s.first_at_or_after(9), None);
        assert_eq!(s.first(), Some(1));
    }

    #[test]
    fn extremes_do_not_overflow() {
        let mut s = RangeSet::from_range(0, u128::MAX);
        assert_eq!(s.len(), u128::MAX); // saturates
        assert!(s.remove(0));
        assert_eq!(s.len(), u128::MAX);
        assert!(s.remove(u128::MAX));
        assert_eq!(s.len(), u128::MAX - 1);
        s.insert_range(u128::MAX, u128::MAX);
        s.insert_range(0, 0);
        assert_eq!(s.range_count(), 1);
        s.remove_range(0, u128::MAX);
        assert!(s.is_empty());
        assert_eq!(s.count_within(5, 1), 0);
    }

    proptest! {
        #[test]
        fn matches_a_btreeset(ops in proptest::collection::vec((0u8..4, 0u128..64, 0u128..8), 0..200)) {
            let mut s = RangeSet::new();
            let mut model = BTreeSet::new();
            for (op, a, len) in ops {
                let b = a + len;
                match op {
                    0 => { prop_assert_eq!(s.insert(a), model.insert(a)); }
                    1 => { prop_assert_eq!(s.remove(a), model.remove(&a)); }
                    2 => { s.insert_range(a, b); model.extend(a..=b); }
                    _ => { s.remove_range(a, b); for x in a..=b { model.remove(&x); } }
                }
                prop_assert_eq!(s.len(), model.len() as u128);
                prop_assert_eq!(s.count_within(10, 40), model.range(10..=40).count() as u128);
                prop_assert_eq!(s.first_at_or_after(a), model.range(a..).next().copied());
                prop_assert_eq!(s.contains(b), model.contains(&b));
                // canonical: sorted, disjoint, never adjacent
                let r: Vec<_> = s.ranges().collect();
                for w in r.windows(2) {
                    prop_assert!(w[0].1 + 1 < w[1].0);
                }
            }
        }
    }
}
