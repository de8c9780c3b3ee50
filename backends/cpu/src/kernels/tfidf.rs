//! `TfIdfVectorizer` (`ir/tfidf.rs`): each row's tokens counted against the pooled n-grams (rule 2 of
//! `onnx/tfidf.rs`), then weighted.

use std::collections::HashMap;

use stowage_compiler::ir::tfidf::{TfIdf, TfIdfMode};

/// The pooled n-grams by their tokens, for [`vectorize`].
pub fn index(t: &TfIdf) -> HashMap<Vec<i64>, u32> {
    t.grams.iter().cloned().collect()
}

/// The weighted counts of each of the `rows` rows of `width` tokens of `x`, `t.columns` per row.
pub fn vectorize(t: &TfIdf, grams: &HashMap<Vec<i64>, u32>, x: &[i64], rows: usize, width: usize) -> Vec<f32> {
    let mut out = vec![0f32; rows * t.columns];
    // No n-gram is longer than a row, and no gap wider: the attributes' larger values change nothing.
    let mut gram = Vec::with_capacity(t.max.min(width));
    for (r, y) in out.chunks_mut(t.columns.max(1)).enumerate().take(rows) {
        let row = &x[(r * width).min(x.len())..((r + 1) * width).min(x.len())];
        for gap in 1..=t.max_skip.min(width) + 1 {
            // Unigrams are counted once, without a gap.
            let shortest = if gap == 1 { t.min } else { t.min.max(2) };
            if shortest > t.max {
                break;
            }
            for start in 0..row.len() {
                if start + gap * (shortest - 1) >= row.len() {
                    break;
                }
                gram.clear();
                for n in 1..=t.max {
                    let Some(&tok) = row.get(start + (n - 1) * gap) else { break };
                    gram.push(tok);
                    if n >= shortest {
                        if let Some(&c) = grams.get(&gram) {
                            y[c as usize] += 1.0;
                        }
                    }
                }
            }
        }
        for (c, v) in y.iter_mut().enumerate() {
            let w = t.weights.get(c).copied().unwrap_or(1.0);
            *v = match t.mode {
                TfIdfMode::Tf => *v,
                TfIdfMode::Idf if *v > 0.0 => w,
                TfIdfMode::Idf => 0.0,
                TfIdfMode::TfIdf => w * *v,
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_and_lengths_beyond_the_row_change_nothing_and_end() {
        let mut t = TfIdf {
            mode: TfIdfMode::Tf,
            min: 1,
            max: 2,
            max_skip: 0,
            grams: vec![(vec![1], 0), (vec![1, 2], 1)],
            weights: vec![],
            columns: 2,
        };
        let x = [1, 2, 1, 5, 2];
        let near = vectorize(&t, &index(&t), &x, 1, 5);
        assert_eq!(near, [2.0, 1.0]);
        // Gaps of up to 4 also find 1 · 2 at distance 4 and at distance 2 (from the second 1).
        t.max_skip = usize::MAX - 1;
        t.max = usize::MAX;
        assert_eq!(vectorize(&t, &index(&t), &x, 1, 5), [2.0, 3.0]);
    }
}
