//! `TfIdfVectorizer` as one [`Op::TfIdf`] (`ir/tfidf.rs`), its pool resolved at import. The rules:
//! 1. **The pool** is `pool_int64s` split by `ngram_counts` into groups of 1-grams, 2-grams, …; n-grams number from
//!    the first group on, and the n-th takes output column `ngram_indexes[n]`. Groups outside
//!    `[min_gram_length, max_gram_length]` are skipped (still numbered). A group whose size is not a multiple of its
//!    length, a start out of order and a column list of another length than the n-grams are errors naming the
//!    attribute.
//! 3. **Strings**: a pool of `pool_strings` numbers its distinct strings in order of first appearance, and the
//!    string tokens are looked up in that vocabulary first (one [`Text::Lookup`], a token outside it `-1`, which no
//!    pooled n-gram holds), so the counting is the same as for token ids.
//! 2. **Counting** (the CPU kernel) follows the reference: for each gap of 0 to `max_skip_count` tokens, each start,
//!    each length from the shortest counted (1-grams only without a gap) to the longest, the n-gram of tokens that
//!    far apart counts when it is pooled.

use super::expand::Ex;
use crate::error::ImportErrorKind as E;
use crate::ir::tfidf::{TfIdf, TfIdfMode};
use crate::ir::{Op, Text};
use stowage_runtime::Tensor;

/// The op types this file imports.
pub const TFIDF_OPS: &[&str] = &["TfIdfVectorizer"];

fn count(ex: &Ex<'_, '_>, name: &str, default: i64) -> Result<usize, E> {
    let v = ex.attrs().int_or(name, default).map_err(|e| ex.attr_err(e))?;
    usize::try_from(v).map_err(|_| ex.attr_fail(name, format!("is {v}: it must not be negative")))
}

/// Imports `TfIdfVectorizer`.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let a = ex.attrs();
    let words = a.strings("pool_strings").map_err(|e| ex.attr_err(e))?;
    let mode = match a.string("mode").map_err(|e| ex.attr_err(e))?.as_deref() {
        Some("TF") => TfIdfMode::Tf,
        Some("IDF") => TfIdfMode::Idf,
        Some("TFIDF") => TfIdfMode::TfIdf,
        other => return Err(ex.attr_fail("mode", format!("is {other:?}: it must be TF, IDF or TFIDF"))),
    };
    let (min, max, max_skip) =
        (count(ex, "min_gram_length", 1)?, count(ex, "max_gram_length", 1)?, count(ex, "max_skip_count", 0)?);
    if min == 0 || min > max {
        return Err(ex.attr_fail("min_gram_length", format!("is {min}: it must be 1 to max_gram_length ({max})")));
    }
    // Rule 3: strings numbered in order of first appearance.
    let mut vocabulary: Vec<String> = Vec::new();
    let pool = match &words {
        Some(words) => {
            let mut ids = std::collections::HashMap::new();
            words
                .iter()
                .map(|w| {
                    *ids.entry(w.as_str()).or_insert_with(|| {
                        vocabulary.push(w.clone());
                        vocabulary.len() as i64 - 1
                    })
                })
                .collect()
        }
        None => a.ints("pool_int64s").map_err(|e| ex.attr_err(e))?.unwrap_or_default(),
    };
    let starts = a.ints("ngram_counts").map_err(|e| ex.attr_err(e))?.unwrap_or_default();
    let columns_of = a.ints("ngram_indexes").map_err(|e| ex.attr_err(e))?.unwrap_or_default();
    let weights = a.floats("weights").map_err(|e| ex.attr_err(e))?.unwrap_or_default();
    if let Some((k, c)) = columns_of.iter().enumerate().find(|(_, c)| u32::try_from(**c).is_err()) {
        return Err(ex.attr_fail("ngram_indexes", format!("ngram_indexes[{k}] is {c}: not an output column")));
    }
    let mut grams = Vec::new();
    let mut id = 0usize;
    for (g, &s) in starts.iter().enumerate() {
        let end = starts.get(g + 1).copied().unwrap_or(pool.len() as i64);
        let (s, end) = (usize::try_from(s).ok(), usize::try_from(end).ok());
        let (Some(s), Some(end)) = (s, end.filter(|&e| e <= pool.len())) else {
            return Err(
                ex.attr_fail("ngram_counts", format!("group {g} does not lie within the {} pooled tokens", pool.len()))
            );
        };
        let n = g + 1;
        if end < s || (end - s) % n != 0 {
            return Err(ex.attr_fail(
                "ngram_counts",
                format!("group {g} holds {} tokens, not a whole number of {n}-grams", end.saturating_sub(s)),
            ));
        }
        for gram in pool[s..end].chunks(n) {
            if (min..=max).contains(&n) {
                let column = columns_of.get(id).copied().and_then(|c| u32::try_from(c).ok()).ok_or_else(|| {
                    ex.attr_fail(
                        "ngram_indexes",
                        format!("has no column for n-gram {id} (it has {})", columns_of.len()),
                    )
                })?;
                grams.push((gram.to_vec(), column));
            }
            id += 1;
        }
    }
    if columns_of.len() != id {
        return Err(ex.attr_fail("ngram_indexes", format!("has {} columns for {id} pooled n-grams", columns_of.len())));
    }
    let columns = columns_of.iter().map(|&c| c.max(0) as usize + 1).max().unwrap_or(0);
    if !weights.is_empty() && weights.len() < columns {
        return Err(ex.attr_fail("weights", format!("has {} values for {columns} columns", weights.len())));
    }
    let op = Op::TfIdf(Box::new(TfIdf { mode, min, max, max_skip, grams, weights, columns }));
    let mut x = ex.input(0)?;
    if words.is_some() {
        let fail = |e: stowage_runtime::RuntimeError| ex.fail(e.to_string());
        let keys = stowage_runtime::strings::tensor_of(&[vocabulary.len()], &vocabulary).map_err(fail)?;
        let ids =
            Tensor::from_vec(&[vocabulary.len()], (0..vocabulary.len() as i64).collect::<Vec<_>>()).map_err(fail)?;
        let unknown = Tensor::from_vec(&[1], vec![-1i64]).map_err(fail)?;
        let (k, v, d) = (ex.constant("vocabulary", keys), ex.constant("ids", ids), ex.constant("unknown", unknown));
        x = ex.ir_op(Op::Text(Text::Lookup), &[&x, &k, &v, &d])?;
    }
    ex.whole(op, &[Some(x)], 1)
}
