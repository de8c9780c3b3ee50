//! `TfIdfVectorizer` ([`Op::TfIdf`](super::Op::TfIdf)): the n-grams of a pool counted in each row of integer tokens,
//! weighted. The import (`onnx/tfidf.rs`) resolves the pool into one list of `(n-gram, output column)`; the CPU
//! kernel (`kernels/tfidf.rs`) counts.

/// How counts become outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TfIdfMode {
    /// The count.
    Tf,
    /// The column's weight (1 without weights) where the count is not 0.
    Idf,
    /// The count times the column's weight.
    TfIdf,
}

/// A resolved `TfIdfVectorizer`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TfIdf {
    /// Weighting.
    pub mode: TfIdfMode,
    /// Shortest n-gram counted.
    pub min: usize,
    /// Longest n-gram counted.
    pub max: usize,
    /// Most tokens skipped between the items of an n-gram.
    pub max_skip: usize,
    /// Every pooled n-gram of a counted length, with its output column.
    pub grams: Vec<(Vec<i64>, u32)>,
    /// Per column (empty: all 1).
    pub weights: Vec<f32>,
    /// Output columns.
    pub columns: usize,
}
