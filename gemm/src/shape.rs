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

    /// A problem as `tilesmith tune` times it: packed, or with odd leading dimensions (one
    /// more where the packed one is even); `batch` problems one after another.
    pub fn tuned(batch: usize, [m, n, k]: [usize; 3], layout: Layout, odd_ld: bool) -> GemmShape {
        let packed = GemmShape::packed(m, n, k, layout);
        let odd = |ld: usize| if odd_ld && ld.is_multiple_of(2) { ld + 1 } else { ld };
        let one = GemmShape { lda: odd(packed.lda), ldb: odd(packed.ldb), ldc: odd(packed.ldc), ..packed };
        if batch == 1 {
            one
        } else {
            one.batched(batch)
        }
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

/// The activation of a GEMM epilogue, C = act(α·A·B + β·C + bias + row_bias), by name: a value
/// of the GEMM family's `epilogue` axis as variants.toml declares it (`relu`, `gelu_tanh`, ...;
/// the variants that apply it are those with that value). [`Activation::NONE`] stands for both
/// `none` (C = A·B, no α, β or bias taken) and `linear`, which apply none. A name the
/// declaration lacks is refused when no variant takes the call.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Activation {
    /// The name's bytes, inline so that an activation is `Copy` and needs no allocation; empty
    /// for none.
    bytes: [u8; Activation::MAX_LEN],
    len: u8,
}

impl Activation {
    /// The longest name an activation may have.
    pub const MAX_LEN: usize = 23;
    /// No activation: C = A·B, or α·A·B + β·C + bias (`linear`).
    pub const NONE: Activation = Activation { bytes: [0; Activation::MAX_LEN], len: 0 };

    /// The activation named `word` (`none` and `linear` are [`Activation::NONE`]); a word that is
    /// not a name (letters, digits and _) of at most [`Activation::MAX_LEN`] bytes is refused.
    pub fn named(word: &str) -> Result<Activation, String> {
        if matches!(word, "none" | "linear") {
            return Ok(Activation::NONE);
        }
        let name = !word.is_empty()
            && !word.starts_with(|c: char| c.is_ascii_digit())
            && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name || word.len() > Activation::MAX_LEN {
            return Err(format!(
                "activation `{word}` is not a value of GEMM's `epilogue` axis: a name (letters, digits and _) of at most {} bytes",
                Activation::MAX_LEN
            ));
        }
        let mut bytes = [0; Activation::MAX_LEN];
        bytes[..word.len()].copy_from_slice(word.as_bytes());
        Ok(Activation { bytes, len: word.len() as u8 })
    }

    /// Its name: `none` for [`Activation::NONE`].
    pub fn as_str(&self) -> &str {
        match self.len {
            0 => "none",
            len => std::str::from_utf8(&self.bytes[..usize::from(len)]).expect("made from a str"),
        }
    }

    /// The `epilogue` values of the variants that apply it: `none` and `linear` for none.
    pub fn epilogues(&self) -> Vec<&str> {
        match self.len {
            0 => vec!["none", "linear"],
            _ => vec![self.as_str()],
        }
    }

    /// Whether a variant with this `epilogue` value applies it.
    pub fn applied_by(&self, epilogue: &str) -> bool {
        match self.len {
            0 => matches!(epilogue, "none" | "linear"),
            _ => epilogue == self.as_str(),
        }
    }

    /// A GEMM variant's `epilogue` value; `none` for a GEMM family without the axis.
    pub fn epilogue_of(variant: &Variant) -> &str {
        variant.word("epilogue").unwrap_or("none")
    }
}

impl std::fmt::Debug for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Activation({})", self.as_str())
    }
}

impl std::fmt::Display for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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
            activation: Activation::NONE,
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
