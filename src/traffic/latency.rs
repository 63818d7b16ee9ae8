//! The fixed log-scale latency buckets the traffic counters are split by,
//! and percentiles read back from them.
//!
//! Bucket `i` holds durations up to `100 µs × 2^(i/2)`: two buckets per
//! doubling, from 100 µs to about 105 s (bucket 40); bucket 41 holds
//! everything longer. A percentile is reported as the upper bound of the
//! bucket it falls in, so it is never below the true value and at most
//! √2 (41 %) above it — within 100 µs–105 s.

use std::collections::BTreeMap;
use std::time::Duration;

/// The last bounded bucket; [`OVERFLOW`] is the one past it.
const LAST: i32 = 40;
/// Durations longer than the last bound.
pub const OVERFLOW: i32 = LAST + 1;

/// The upper bound of bucket `bucket`, in microseconds (the overflow
/// bucket's is the last bound: a lower bound of what it holds).
pub fn upper_bound_micros(bucket: i32) -> u64 {
    let bucket = bucket.clamp(0, LAST);
    // 100 µs × 2^(bucket/2): odd buckets add the factor √2, rounded.
    let base = 100u64 << (bucket / 2);
    if bucket % 2 == 0 {
        base
    } else {
        (base as f64 * std::f64::consts::SQRT_2).round() as u64
    }
}

/// The bucket a processing time of `elapsed` is counted in.
pub fn bucket_of(elapsed: Duration) -> i32 {
    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    (0..=LAST)
        .find(|&bucket| micros <= upper_bound_micros(bucket))
        .unwrap_or(OVERFLOW)
}

/// The `quantile` (0 < q ≤ 1) of the durations counted in `buckets`, as its
/// bucket's upper bound; `None` when nothing was counted.
pub fn percentile(buckets: &BTreeMap<i32, i64>, quantile: f64) -> Option<Duration> {
    let total: i64 = buckets.values().sum();
    if total <= 0 {
        return None;
    }
    // The rank of the value that `quantile` of the values are at or below.
    let rank = ((quantile * total as f64).ceil() as i64).clamp(1, total);
    let mut seen = 0;
    for (&bucket, &count) in buckets {
        seen += count;
        if seen >= rank {
            return Some(Duration::from_micros(upper_bound_micros(bucket)));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_grow_by_root_two_from_100_microseconds_to_105_seconds() {
        assert_eq!(upper_bound_micros(0), 100);
        assert_eq!(upper_bound_micros(1), 141);
        assert_eq!(upper_bound_micros(2), 200);
        assert_eq!(upper_bound_micros(20), 102_400);
        assert_eq!(upper_bound_micros(LAST), 104_857_600);
        for bucket in 1..=LAST {
            let ratio = upper_bound_micros(bucket) as f64 / upper_bound_micros(bucket - 1) as f64;
            assert!(
                (ratio - std::f64::consts::SQRT_2).abs() < 0.01,
                "{bucket}: {ratio}"
            );
        }
    }

    #[test]
    fn a_duration_falls_in_the_first_bucket_whose_bound_it_does_not_pass() {
        assert_eq!(bucket_of(Duration::ZERO), 0);
        assert_eq!(bucket_of(Duration::from_micros(100)), 0);
        assert_eq!(bucket_of(Duration::from_micros(101)), 1);
        assert_eq!(bucket_of(Duration::from_micros(141)), 1);
        assert_eq!(bucket_of(Duration::from_micros(142)), 2);
        assert_eq!(bucket_of(Duration::from_millis(3)), 10); // 2.896 ms < 3 ms ≤ 3.2 ms
        assert_eq!(bucket_of(Duration::from_secs(3600)), OVERFLOW);
    }

    #[test]
    fn percentiles_are_the_upper_bound_of_the_bucket_holding_that_rank() {
        let mut buckets = BTreeMap::new();
        assert_eq!(percentile(&buckets, 0.5), None);
        // 98 fast (≤ 1.6 ms), 2 slow (≤ 409.6 ms).
        buckets.insert(bucket_of(Duration::from_millis(1)), 98);
        buckets.insert(bucket_of(Duration::from_millis(300)), 2);
        assert_eq!(
            percentile(&buckets, 0.5),
            Some(Duration::from_micros(1_131))
        );
        assert_eq!(
            percentile(&buckets, 0.98),
            Some(Duration::from_micros(1_131))
        );
        assert_eq!(
            percentile(&buckets, 0.99),
            Some(Duration::from_micros(409_600))
        );
        assert_eq!(
            percentile(&buckets, 1.0),
            Some(Duration::from_micros(409_600))
        );
    }

    #[test]
    fn a_reported_percentile_is_at_most_root_two_above_the_true_value() {
        for micros in [150u64, 999, 12_345, 2_000_000, 90_000_000] {
            let mut buckets = BTreeMap::new();
            buckets.insert(bucket_of(Duration::from_micros(micros)), 1);
            let reported = percentile(&buckets, 0.5).unwrap().as_micros() as f64;
            assert!(reported >= micros as f64, "{micros}");
            assert!(
                reported <= micros as f64 * std::f64::consts::SQRT_2 + 1.0,
                "{micros}"
            );
        }
    }
}
