//! The shapes of GEMM and transpose calls, and what a GEMM asks beside them (its epilogue).

use tilesmith_runtime::{batch_span, span, Buffer};
use tilesmith_spec::{Dtype, Layout, Variant};

/// C (M×N, row-major) = A (M×K) · B (K×N), stored as `layout` says, with leading dimensions;
/// for each problem of a strided batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub layout: Layout,
    pub batch: Batch,
}

/// A strided batch of GEMM problems: `count` of them, problem p's A, B and C `p·strides[i]`
/// elements on from the first's (cuBLAS's strided batch). A stride of 0 for A or B makes every
/// problem read the same matrix (a broadcast); C's must keep the problems' outputs apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Batch {
    pub count: usize,
    /// Elements between problems of A, B and C.
    pub strides: [usize; 3],
}

impl Batch {
    /// One problem.
    pub const ONE: Batch = Batch { count: 1, strides: [0; 3] };
}

impl Default for Batch {
    fn default() -> Batch {
        Batch::ONE
    }
}

impl GemmShape {
    /// Leading dimensions equal to the stored rows' lengths: no padding; one problem.
    pub fn packed(m: usize, n: usize, k: usize, layout: Layout) -> GemmShape {
        let lda = if layout.a_row_major() { k } else { m };
        let ldb = if layout.b_row_major() { n } else { k };
        GemmShape { m, n, k, lda, ldb, ldc: n, layout, batch: Batch::ONE }
    }

    /// `count` problems of this shape, each matrix right after the previous problem's.
    pub fn batched(self, count: usize) -> GemmShape {
        GemmShape { batch: Batch { count, strides: self.problem_spans() }, ..self }
    }

    /// With this batch.
    pub fn with_batch(self, batch: Batch) -> GemmShape {
        GemmShape { batch, ..self }
    }

    /// Whether it is more than one problem.
    pub fn is_batched(&self) -> bool {
        self.batch.count != 1
    }

    /// (rows, row length) of A, B and C as stored.
    pub fn stored(&self) -> [(usize, usize); 3] {
        let a = if self.layout.a_row_major() { (self.m, self.k) } else { (self.k, self.m) };
        let b = if self.layout.b_row_major() { (self.k, self.n) } else { (self.n, self.k) };
        [a, b, (self.m, self.n)]
    }

    /// Elements each of A, B and C of one problem spans.
    pub fn problem_spans(&self) -> [usize; 3] {
        let lds = [self.lda, self.ldb, self.ldc];
        let stored = self.stored();
        [0, 1, 2].map(|i| span(stored[i].0, stored[i].1, lds[i]).unwrap_or(usize::MAX))
    }

    /// Elements each of A, B and C spans over every problem: what its buffer must hold.
    pub fn spans(&self) -> [usize; 3] {
        let one = self.problem_spans();
        let Batch { count, strides } = self.batch;
        [0, 1, 2].map(|i| batch_span(one[i], count, strides[i]).unwrap_or(usize::MAX))
    }
}

/// The activation of a GEMM epilogue, C = act(α·A·B + β·C + bias + row_bias): the values of
/// the GEMM family's `epilogue` axis, `None` standing for both `none` (C = A·B, no α, β or
/// bias taken) and `linear`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Activation {
    #[default]
    None,
    Relu,
    /// GELU's tanh form, cuBLASLt's `GELU`: x/2 · (1 + tanh(√(2/π)·(x + 0.044715x³))).
    GeluTanh,
    /// GELU's exact form: x/2 · (1 + erf(x/√2)).
    GeluErf,
    /// x · sigmoid(x).
    Silu,
}

impl Activation {
    pub const ALL: [Activation; 5] = [Activation::None, Activation::Relu, Activation::GeluTanh, Activation::GeluErf, Activation::Silu];

    /// The `epilogue` axis values of the variants that apply it.
    pub fn epilogues(self) -> &'static [&'static str] {
        match self {
            Activation::None => &["none", "linear"],
            Activation::Relu => &["relu"],
            Activation::GeluTanh => &["gelu_tanh"],
            Activation::GeluErf => &["gelu_erf"],
            Activation::Silu => &["silu"],
        }
    }

    /// A GEMM variant's `epilogue` value; `none` for a GEMM family without the axis.
    pub fn epilogue_of(variant: &Variant) -> &str {
        variant.word("epilogue").unwrap_or("none")
    }

    /// The activation a variant with this `epilogue` value applies.
    pub fn of_epilogue(word: &str) -> Option<Activation> {
        Activation::ALL.into_iter().find(|a| a.epilogues().contains(&word))
    }
}

/// What a GEMM call asks beside its shape and buffers, as the checks see it: the epilogue, and
/// the types of B and C where they are not A's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpilogueArgs {
    pub activation: Activation,
    pub alpha: f32,
    pub beta: f32,
    /// One per column of C (N elements).
    pub bias: Option<Buffer>,
    /// One per row of C (M elements).
    pub row_bias: Option<Buffer>,
    /// The element type of C and the biases where it is not the inputs' (GEMM's `out` axis:
    /// bf16 outputs of e4m3 inputs).
    pub out: Option<Dtype>,
    /// The element type of B where it is not A's (GEMM's `b_dtype` axis: e5m2 gradients by e4m3
    /// weights).
    pub b: Option<Dtype>,
    /// scale_a and scale_b, the per-tensor scales of 8-bit inputs.
    pub scales: [f32; 2],
}

impl Default for EpilogueArgs {
    /// C = A·B, in the inputs' type.
    fn default() -> EpilogueArgs {
        EpilogueArgs {
            activation: Activation::None,
            alpha: 1.0,
            beta: 0.0,
            bias: None,
            row_bias: None,
            out: None,
            b: None,
            scales: [1.0, 1.0],
        }
    }
}

impl EpilogueArgs {
    /// Whether it asks for nothing beyond C = A·B.
    pub fn is_plain(&self) -> bool {
        *self == EpilogueArgs::default()
    }
}

/// Y (N×M) = Xᵀ, X (M×N); both row-major with leading dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransposeShape {
    pub m: usize,
    pub n: usize,
    pub ldx: usize,
    pub ldy: usize,
}

impl TransposeShape {
    pub fn packed(m: usize, n: usize) -> TransposeShape {
        TransposeShape { m, n, ldx: n, ldy: m }
    }

    /// Elements each of X and Y spans.
    pub fn spans(&self) -> [usize; 2] {
        [span(self.m, self.n, self.ldx), span(self.n, self.m, self.ldy)].map(|s| s.unwrap_or(usize::MAX))
    }
}
