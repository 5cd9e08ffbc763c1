//! Latency percentiles and medians across repeats.

/// Latency percentiles of one run, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
}

/// Percentiles of latencies given in microseconds (nearest-rank); `None`
/// when nothing was recorded.
pub fn percentiles(mut us: Vec<u32>) -> Option<Percentiles> {
    if us.is_empty() {
        return None;
    }
    us.sort_unstable();
    let at = |p: f64| -> f64 {
        let rank = ((us.len() as f64 * p).ceil() as usize).clamp(1, us.len());
        us[rank - 1] as f64 / 1000.0
    };
    Some(Percentiles {
        p50: at(0.50),
        p99: at(0.99),
        p999: at(0.999),
    })
}

/// Median of the values (mean of the middle two for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// Smallest and largest of the values.
pub fn range(values: &[f64]) -> Option<(f64, f64)> {
    let v = values.iter().copied().filter(|x| x.is_finite());
    let (lo, hi) = v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    (lo <= hi).then_some((lo, hi))
}

/// Microseconds as `u32`, saturating: latencies are far below 71 minutes.
pub fn clamp_us(us: u128) -> u32 {
    us.min(u32::MAX as u128) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let p = percentiles((1..=1000).collect()).expect("some");
        assert_eq!(p.p50, 0.5);
        assert_eq!(p.p99, 0.99);
        assert_eq!(p.p999, 0.999);
        assert!(percentiles(Vec::new()).is_none());
    }

    #[test]
    fn medians_and_ranges() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(range(&[2.0, 5.0, 1.0]), Some((1.0, 5.0)));
    }
}
