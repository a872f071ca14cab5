//! Linear regression with confidence intervals, on `linfa-elasticnet` (ridge) over `ndarray`.
//!
//! Features are standardised before the fit (so that one penalty suits every feature and the
//! coordinate descent converges), and the coefficients and their intervals are mapped back to the
//! original units. The intervals are the ones `linfa-elasticnet` computes
//! (`confidence_95th`: coefficient ± 1.645 standard errors, i.e. a two-sided 90 % interval), from
//! the residual variance; on autocorrelated telemetry they are optimistic, which is why every
//! calibrated parameter also reports the number of samples it came from.

use linfa::prelude::*;
use linfa_elasticnet::ElasticNet;
use linfa_linalg::eigh::Eigh;
use ndarray::{Array1, Array2};
use serde::{Deserialize, Serialize};

/// A regression could not be fitted.
#[derive(Debug, Clone, PartialEq)]
pub enum FitError {
    /// Fewer samples than features + 2.
    NotEnoughSamples {
        /// Samples available.
        n: usize,
        /// Features.
        p: usize,
    },
    /// A feature or target was not finite.
    NonFinite,
    /// linfa refused the problem.
    Solver(String),
}

impl std::error::Error for FitError {}

impl std::fmt::Display for FitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FitError::NotEnoughSamples { n, p } => write!(f, "{n} samples are too few for {p} features"),
            FitError::NonFinite => write!(f, "a feature or target is not finite"),
            FitError::Solver(m) => write!(f, "ridge solver: {m}"),
        }
    }
}

/// A fitted linear model `y = intercept + Σ coef_j · x_j`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct LinearFit {
    /// Intercept.
    pub intercept: f64,
    /// Coefficients, in the units of the features.
    pub coef: Vec<f64>,
    /// Interval of each coefficient (linfa's `confidence_95th`, ± 1.645 σ), or NaN when linfa
    /// could not compute the variance.
    pub ci: Vec<(f64, f64)>,
    /// Root-mean-square residual on the fitted samples.
    pub rmse: f64,
    /// Samples used.
    pub n: usize,
}

impl LinearFit {
    /// Prediction for one feature vector.
    #[inline]
    pub fn predict(&self, x: &[f64]) -> f64 {
        self.intercept + self.coef.iter().zip(x).map(|(c, v)| c * v).sum::<f64>()
    }
}

/// Row-major sample accumulator for one regression.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples {
    /// Features per sample.
    pub p: usize,
    /// Flat features, `n × p`.
    pub x: Vec<f64>,
    /// Targets.
    pub y: Vec<f64>,
    /// Bound on samples kept (older ones are thinned by half when it is reached).
    pub cap: usize,
}

impl Samples {
    /// An empty accumulator for `p` features keeping at most `cap` samples.
    pub fn new(p: usize, cap: usize) -> Self {
        Self {
            p,
            x: Vec::new(),
            y: Vec::new(),
            cap: cap.max(16),
        }
    }
    /// Add one sample (ignored when any value is not finite).
    pub fn push(&mut self, x: &[f64], y: f64) {
        debug_assert_eq!(x.len(), self.p);
        if !y.is_finite() || x.iter().any(|v| !v.is_finite()) {
            return;
        }
        if self.y.len() >= self.cap {
            // Keep every other sample: bounded memory, the whole history still represented.
            let p = self.p;
            let n = self.y.len();
            let mut k = 0;
            for i in (0..n).step_by(2) {
                self.y[k] = self.y[i];
                for j in 0..p {
                    self.x[k * p + j] = self.x[i * p + j];
                }
                k += 1;
            }
            self.y.truncate(k);
            self.x.truncate(k * p);
        }
        self.x.extend_from_slice(x);
        self.y.push(y);
    }
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.y.len()
    }
    /// No samples yet.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
    /// Fit a ridge regression (penalty on standardised features).
    pub fn fit(&self, penalty: f64) -> Result<LinearFit, FitError> {
        fit_ridge(&self.x, &self.y, self.p, penalty)
    }
}

/// Fit `y ≈ b + X w` by ridge regression with `linfa-elasticnet` (l1 ratio 0) on standardised
/// features. `x` is row-major `n × p`.
pub fn fit_ridge(x: &[f64], y: &[f64], p: usize, penalty: f64) -> Result<LinearFit, FitError> {
    let n = y.len();
    if n < p + 2 || x.len() != n * p {
        return Err(FitError::NotEnoughSamples { n, p });
    }
    if x.iter().chain(y).any(|v| !v.is_finite()) {
        return Err(FitError::NonFinite);
    }
    let mut mean = vec![0.0; p];
    let mut sd = vec![0.0; p];
    for i in 0..n {
        for j in 0..p {
            mean[j] += x[i * p + j];
        }
    }
    mean.iter_mut().for_each(|m| *m /= n as f64);
    for i in 0..n {
        for j in 0..p {
            sd[j] += (x[i * p + j] - mean[j]).powi(2);
        }
    }
    sd.iter_mut().for_each(|s| {
        *s = (*s / n as f64).sqrt();
        if s.is_nan() || *s <= 1e-12 {
            *s = 1.0;
        }
    });
    let y_mean = y.iter().sum::<f64>() / n as f64;
    let mut xs = Array2::<f64>::zeros((n, p));
    for i in 0..n {
        for j in 0..p {
            xs[[i, j]] = (x[i * p + j] - mean[j]) / sd[j];
        }
    }
    let ys = Array1::from_iter(y.iter().map(|v| v - y_mean));
    // Principal axes of the standardised features: ridge is invariant under this rotation (the
    // penalty is on the norm of the weights), and on orthogonal columns coordinate descent is
    // exact after one sweep. Without it, linfa's solver never stops early on ridge (its duality
    // gap is not valid for l1_ratio 0, so it always runs its iteration cap) and on features as
    // collinear as a rack's `p` and `p·q^-0.8` it stops at the cap short of the solution.
    let gram = xs.t().dot(&xs);
    let (zs, rot) = match gram.eigh() {
        Ok((lambda, v)) if v.iter().chain(lambda.iter()).all(|x| x.is_finite()) => {
            let mut zs = xs.dot(&v);
            // A direction the data do not span (a constant or duplicated feature) is left out,
            // not fitted on rounding noise: its column is zero, the solver skips it, and the
            // intervals are NaN as they were for a singular design before the rotation.
            let top = lambda.iter().copied().fold(0.0, f64::max);
            for (k, &l) in lambda.iter().enumerate() {
                if l <= 1e-12 * top {
                    zs.column_mut(k).fill(0.0);
                }
            }
            (zs, Some(v))
        }
        _ => (xs, None),
    };
    let ds = Dataset::new(zs, ys);
    let model = ElasticNet::params()
        .penalty(penalty)
        .l1_ratio(0.0)
        .with_intercept(false)
        .tolerance(1e-6)
        .max_iterations(if rot.is_some() { 4 } else { 1_000 })
        .fit(&ds)
        .map_err(|e| FitError::Solver(e.to_string()))?;
    let u = model.hyperplane();
    // Back to the standardised features: w = V·u; the variance of each w_j is Σ_k V_jk²·var(u_k)
    // (the rotated columns are orthogonal, so the u_k are uncorrelated).
    let half_u: Option<Vec<f64>> = model
        .confidence_95th()
        .ok()
        .map(|c| c.iter().map(|(lo, hi)| (hi - lo) / 2.0).collect());
    let (w, half): (Vec<f64>, Option<Vec<f64>>) = match &rot {
        Some(v) => (
            (0..p).map(|j| (0..p).map(|k| v[[j, k]] * u[k]).sum()).collect(),
            half_u.map(|h| {
                (0..p)
                    .map(|j| (0..p).map(|k| (v[[j, k]] * h[k]).powi(2)).sum::<f64>().sqrt())
                    .collect()
            }),
        ),
        None => (u.to_vec(), half_u),
    };
    let coef: Vec<f64> = (0..p).map(|j| w[j] / sd[j]).collect();
    let intercept = y_mean - (0..p).map(|j| coef[j] * mean[j]).sum::<f64>();
    let ci = (0..p)
        .map(|j| match &half {
            Some(h) => ((w[j] - h[j]) / sd[j], (w[j] + h[j]) / sd[j]),
            None => (f64::NAN, f64::NAN),
        })
        .collect();
    let mut fit = LinearFit {
        intercept,
        coef,
        ci,
        rmse: 0.0,
        n,
    };
    let sse: f64 = (0..n)
        .map(|i| (y[i] - fit.predict(&x[i * p..(i + 1) * p])).powi(2))
        .sum();
    fit.rmse = (sse / n as f64).sqrt();
    Ok(fit)
}

/// Empirical quantile (linear interpolation) of a slice; NaN when empty.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    let pos = q.clamp(0.0, 1.0) * (s.len() - 1) as f64;
    let i = pos.floor() as usize;
    let f = pos - i as f64;
    if i + 1 < s.len() {
        s[i] * (1.0 - f) + s[i + 1] * f
    } else {
        s[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_a_known_line_with_an_interval_that_covers_it() {
        let mut s = Samples::new(2, 10_000);
        let mut r = 1u64;
        for i in 0..500 {
            r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let noise = ((r >> 33) as f64 / (1u64 << 31) as f64 - 0.5) * 0.2;
            let a = i as f64 * 0.1;
            let b = (i as f64 * 0.37).sin() * 5.0;
            s.push(&[a, b], 3.0 + 2.0 * a - 0.5 * b + noise);
        }
        let f = s.fit(1e-8).unwrap();
        assert!((f.coef[0] - 2.0).abs() < 0.01, "{f:?}");
        assert!((f.coef[1] + 0.5).abs() < 0.01, "{f:?}");
        assert!((f.intercept - 3.0).abs() < 0.05, "{f:?}");
        assert!(f.ci[0].0 < 2.0 && f.ci[0].1 > 2.0 - 0.02, "{f:?}");
        assert!(f.ci[0].1 - f.ci[0].0 < 0.05);
    }

    /// On features as collinear as a rack fit's (`p` and `p·q^-0.8` with the flow barely
    /// moving, correlation 0.9995) the fit is the ridge solution, computed here independently
    /// from the normal equations; the unrotated solver stopped at its cap well short of it.
    #[test]
    fn collinear_features_get_the_ridge_solution() {
        let (n, pen) = (1024, 1e-3);
        let mut r = 7u64;
        let mut next = || {
            r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (r >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut s = Samples::new(2, 4096);
        for _ in 0..n {
            let (u, v) = (next(), next());
            let p = 600.0 + 400.0 * u;
            let q: f64 = 1.0 - 0.02 * v;
            let x = [p, p * q.powf(-0.8)];
            s.push(&x, 0.01 * x[0] + 0.03 * x[1] + (next() - 0.5) * 0.5);
        }
        let f = s.fit(pen).unwrap();
        // Normal equations on standardised features: (XᵀX/n + λI) w = Xᵀy/n.
        let mean: Vec<f64> = (0..2)
            .map(|j| (0..n).map(|i| s.x[i * 2 + j]).sum::<f64>() / n as f64)
            .collect();
        let sd: Vec<f64> = (0..2)
            .map(|j| ((0..n).map(|i| (s.x[i * 2 + j] - mean[j]).powi(2)).sum::<f64>() / n as f64).sqrt())
            .collect();
        let ym = s.y.iter().sum::<f64>() / n as f64;
        let z = |i: usize, j: usize| (s.x[i * 2 + j] - mean[j]) / sd[j];
        let g = |a: usize, b: usize| (0..n).map(|i| z(i, a) * z(i, b)).sum::<f64>() / n as f64;
        let c = |a: usize| (0..n).map(|i| z(i, a) * (s.y[i] - ym)).sum::<f64>() / n as f64;
        let (a11, a12, a22) = (g(0, 0) + pen, g(0, 1), g(1, 1) + pen);
        let det = a11 * a22 - a12 * a12;
        let w = [(a22 * c(0) - a12 * c(1)) / det, (a11 * c(1) - a12 * c(0)) / det];
        for j in 0..2 {
            let want = w[j] / sd[j];
            assert!(
                (f.coef[j] - want).abs() <= 1e-6 * want.abs(),
                "coef {j}: {} vs {want}",
                f.coef[j]
            );
            assert!(f.ci[j].0 < f.coef[j] && f.coef[j] < f.ci[j].1, "{f:?}");
        }
        // The solver without the rotation (what the fit used before) misses it.
        let xs = Array2::from_shape_fn((n, 2), |(i, j)| z(i, j));
        let ys = Array1::from_iter(s.y.iter().map(|v| v - ym));
        let old = ElasticNet::params()
            .penalty(pen)
            .l1_ratio(0.0)
            .with_intercept(false)
            .tolerance(1e-6)
            .max_iterations(1_000)
            .fit(&Dataset::new(xs, ys))
            .unwrap();
        assert_eq!(old.n_steps(), 1_000, "the unrotated solver runs to its cap");
        assert!(
            (old.hyperplane()[0] - w[0]).abs() > 1e-3 * w[0].abs(),
            "{} vs {}",
            old.hyperplane()[0],
            w[0]
        );
    }

    #[test]
    fn too_few_samples_is_an_error_not_a_panic() {
        let s = Samples::new(3, 100);
        assert!(matches!(s.fit(0.0), Err(FitError::NotEnoughSamples { .. })));
        assert!(fit_ridge(&[f64::NAN, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], &[1.0; 4], 2, 0.0).is_err());
    }

    #[test]
    fn quantiles() {
        let v: Vec<f64> = (0..=100).map(|i| i as f64).collect();
        assert_eq!(quantile(&v, 0.9), 90.0);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
