//! GEMM's float64 references on the host: the product in any layout, and the epilogue.

use crate::{Activation, GemmShape};
use rand::Rng;
use tilesmith_runtime::Element;
use tilesmith_trials::host::random;

/// Element (i, k) of A and (k, j) of B as stored in `shape`'s layout.
pub struct Operands<'a, T, TB = T> {
    pub shape: GemmShape,
    pub a: &'a [T],
    pub b: &'a [TB],
}

impl<T: Element, TB: Element> Operands<'_, T, TB> {
    pub fn a(&self, i: usize, k: usize) -> f64 {
        let s = &self.shape;
        let index = if s.layout.a_row_major() { i * s.lda + k } else { k * s.lda + i };
        self.a[index].to_f64()
    }

    pub fn b(&self, k: usize, j: usize) -> f64 {
        let s = &self.shape;
        let index = if s.layout.b_row_major() { k * s.ldb + j } else { j * s.ldb + k };
        self.b[index].to_f64()
    }

    /// One element of C = A·B, in float64.
    pub fn c(&self, i: usize, j: usize) -> f64 {
        (0..self.shape.k).map(|k| self.a(i, k) * self.b(k, j)).sum()
    }

    /// All of C, M×N row-major, in float64.
    pub fn product(&self) -> Vec<f64> {
        let (m, n, k) = (self.shape.m, self.shape.n, self.shape.k);
        // Dense copies keep the inner loop contiguous.
        let a: Vec<f64> = (0..m).flat_map(|i| (0..k).map(move |p| (i, p))).map(|(i, p)| self.a(i, p)).collect();
        let bt: Vec<f64> = (0..n).flat_map(|j| (0..k).map(move |p| (j, p))).map(|(j, p)| self.b(p, j)).collect();
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = a[i * k..(i + 1) * k].iter().zip(&bt[j * k..(j + 1) * k]).map(|(x, y)| x * y).sum();
            }
        }
        c
    }
}

/// A GEMM epilogue's inputs as the host made them:
/// C = act(α·scale_a·scale_b·A·B + β·C₀ + bias + row_bias).
#[derive(Clone, Debug)]
pub struct EpilogueInputs<T> {
    pub activation: Activation,
    pub alpha: f32,
    pub beta: f32,
    /// The per-tensor scales of 8-bit inputs.
    pub scales: [f32; 2],
    /// N elements.
    pub bias: Option<Vec<T>>,
    /// M elements.
    pub row_bias: Option<Vec<T>>,
    /// C before the call, as stored (its leading dimension); read where β ≠ 0.
    pub c: Option<Vec<T>>,
}

impl<T: Element> EpilogueInputs<T> {
    /// C = A·B.
    pub fn plain() -> Self {
        EpilogueInputs { activation: Activation::NONE, alpha: 1.0, beta: 0.0, scales: [1.0; 2], bias: None, row_bias: None, c: None }
    }

    /// The same with random per-tensor scales in [0.25, 4).
    pub fn with_random_scales(self) -> Self {
        let mut rng = rand::rng();
        EpilogueInputs { scales: [0, 1].map(|_| 2f32.powf(rng.random_range(-2.0..2.0))), ..self }
    }

    /// Random α, β and biases for an activation, sized for `shape`: α in [0.5, 1.5); with
    /// `beta`, β in [0.5, 1.5) and a random C₀ (else β = 0 and C₀ unread, NaN); a bias always,
    /// a row bias with `row_bias`.
    pub fn random(activation: Activation, shape: &GemmShape, c_len: usize, beta: bool, row_bias: bool) -> Self {
        let mut rng = rand::rng();
        EpilogueInputs {
            activation,
            alpha: rng.random_range(0.5..1.5),
            beta: if beta { rng.random_range(0.5..1.5) } else { 0.0 },
            scales: [1.0; 2],
            bias: Some(random(shape.n)),
            row_bias: row_bias.then(|| random(shape.m)),
            c: beta.then(|| random(c_len)),
        }
    }

    /// Output (i, j) of C from the float64 product `x` there, C starting `offset` elements in.
    pub fn apply(&self, x: f64, i: usize, j: usize, offset: usize, ldc: usize) -> f64 {
        let mut v = f64::from(self.alpha) * f64::from(self.scales[0]) * f64::from(self.scales[1]) * x;
        if self.beta != 0.0 {
            v += f64::from(self.beta) * self.c.as_ref().map_or(0.0, |c| c[offset + i * ldc + j].to_f64());
        }
        v += self.bias.as_ref().map_or(0.0, |b| b[j].to_f64());
        v += self.row_bias.as_ref().map_or(0.0, |b| b[i].to_f64());
        activate(self.activation, v)
    }

    /// All of C (M×N, row-major) of the problem whose C starts `offset` elements into the
    /// buffer, from its product.
    pub fn apply_all(&self, product: &[f64], shape: &GemmShape, offset: usize) -> Vec<f64> {
        let ldc = shape.ldc;
        product.iter().enumerate().map(|(index, x)| self.apply(*x, index / shape.n, index % shape.n, offset, ldc)).collect()
    }
}

/// An activation in float64, by its definition, for the values of the `epilogue` axis the
/// trials know; `None` for another (a new activation is defined here and in the template).
pub fn activation(activation: Activation) -> Option<fn(f64) -> f64> {
    Some(match activation.as_str() {
        "none" => |x| x,
        "relu" => |x: f64| x.max(0.0),
        "gelu_tanh" => |x: f64| 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh()),
        "gelu_erf" => |x: f64| 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        "silu" => |x: f64| x / (1.0 + (-x).exp()),
        _ => return None,
    })
}

/// [`activation`] applied to `x`; NaN, which no comparison passes, for an activation it does
/// not define (the trials refuse those before computing, naming them).
pub fn activate(activation: Activation, x: f64) -> f64 {
    self::activation(activation).map_or(f64::NAN, |f| f(x))
}
