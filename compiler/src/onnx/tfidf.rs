//! `TfIdfVectorizer` as one [`Op::TfIdf`] (`ir/tfidf.rs`), its pool resolved at import. The rules:
//! 1. **The pool** is `pool_int64s` split by `ngram_counts` into groups of 1-grams, 2-grams, …; n-grams number from
//!    the first group on, and the n-th takes output column `ngram_indexes[n]`. Groups outside
//!    `[min_gram_length, max_gram_length]` are skipped (still numbered). A group whose size is not a multiple of its
//!    length, a start out of order, a column list of another length than the n-grams, and string pools (stowage
//!    has no string tensors) are errors naming the attribute.
//! 2. **Counting** (the CPU kernel) follows the reference: for each gap of 0 to `max_skip_count` tokens, each start,
//!    each length from the shortest counted (1-grams only without a gap) to the longest, the n-gram of tokens that
//!    far apart counts when it is pooled.

use super::expand::Ex;
use crate::error::ImportErrorKind as E;
use crate::ir::tfidf::{TfIdf, TfIdfMode};
use crate::ir::Op;

/// The op types this file imports.
pub const TFIDF_OPS: &[&str] = &["TfIdfVectorizer"];

fn count(ex: &Ex<'_, '_>, name: &str, default: i64) -> Result<usize, E> {
    let v = ex.attrs().int_or(name, default).map_err(|e| ex.attr_err(e))?;
    usize::try_from(v).map_err(|_| ex.attr_fail(name, format!("is {v}: it must not be negative")))
}

/// Imports `TfIdfVectorizer`.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let a = ex.attrs();
    if a.has("pool_strings") {
        return Err(ex.attr_fail("pool_strings", "holds strings: stowage has no string tensors (pool token ids)"));
    }
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
    let pool = a.ints("pool_int64s").map_err(|e| ex.attr_err(e))?.unwrap_or_default();
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
    let x = ex.input(0)?;
    ex.whole(op, &[Some(x)], 1)
}
