//! Host-side inputs and float64 references.

use rand::Rng;
use tilesmith_runtime::Element;

/// `len` random elements, uniform in [-1, 1): fresh on every call, never all zeros.
pub fn random<T: Element>(len: usize) -> Vec<T> {
    let mut rng = rand::rng();
    (0..len).map(|_| T::from_f64(rng.random_range(-1.0..1.0))).collect()
}

/// Relative Frobenius error ‖out − reference‖ / ‖reference‖ over the reference's finite
/// elements; infinite if `out` holds a NaN or an infinity where the reference does not hold the
/// same (a NaN the reference has is a declared result, as a bad index's).
pub fn relative_error(out: &[f64], reference: &[f64]) -> f64 {
    assert_eq!(out.len(), reference.len(), "compared slices differ in length");
    let same_class = |o: &f64, r: &f64| {
        if r.is_nan() {
            o.is_nan()
        } else if r.is_infinite() {
            o == r
        } else {
            o.is_finite()
        }
    };
    if !out.iter().zip(reference).all(|(o, r)| same_class(o, r)) {
        return f64::INFINITY;
    }
    let finite = || out.iter().zip(reference).filter(|(_, r)| r.is_finite());
    let diff: f64 = finite().map(|(o, r)| (o - r) * (o - r)).sum();
    let norm: f64 = finite().map(|(_, r)| r * r).sum();
    if norm == 0.0 {
        return diff.sqrt();
    }
    (diff / norm).sqrt()
}

/// Splits a poisoned output of `problems` matrices of `rows` rows with leading dimension `ld`,
/// `stride` elements apart, into the values of their `rows`×`cols` regions (problem after
/// problem), and counts region elements left unwritten (NaN) and elements outside every region
/// that were written (no longer NaN). The regions must not overlap.
pub fn read_regions<T: Element>(
    out: &[T],
    rows: usize,
    cols: usize,
    ld: usize,
    problems: usize,
    stride: usize,
) -> (Vec<f64>, usize, usize) {
    let region: Vec<f64> = region_indices(rows, cols, ld, problems, stride).map(|index| out[index].to_f64()).collect();
    let unwritten = region.iter().filter(|v| v.is_nan()).count();
    let inside = region_mask(out.len(), rows, cols, ld, problems, stride);
    let outside = out.iter().zip(&inside).filter(|(value, inside)| !**inside && !value.to_f64().is_nan()).count();
    (region, unwritten, outside)
}

/// The indices of the `rows`×`cols` regions of `problems` matrices with leading dimension
/// `ld`, `stride` elements apart, problem after problem, row by row.
fn region_indices(rows: usize, cols: usize, ld: usize, problems: usize, stride: usize) -> impl Iterator<Item = usize> {
    (0..problems).flat_map(move |p| (0..rows).flat_map(move |i| (0..cols).map(move |j| p * stride + i * ld + j)))
}

/// Which of `len` elements lie in those regions.
pub fn region_mask(len: usize, rows: usize, cols: usize, ld: usize, problems: usize, stride: usize) -> Vec<bool> {
    let mut inside = vec![false; len];
    for index in region_indices(rows, cols, ld, problems, stride) {
        inside[index] = true;
    }
    inside
}
