//! The ops on strings computed, for folding and for the CPU's kernels alike (`ir/text.rs`), and `Cast` to and
//! from strings. Strings are handles into the process's string table (`stowage_runtime::strings`). The rules:
//! 1. **Whole characters**: concatenation, case and splitting work on UTF-8 text, never on bytes; case follows
//!    Unicode's default mapping (`str::to_lowercase`), whatever the model's `locale`.
//! 2. **Full match**: `RegexFullMatch` anchors the model's pattern at both ends (`\A(?:pattern)\z`), the pattern
//!    read alone first; the `regex` crate reads RE2's syntax, which ONNX names, and runs in time linear in the text.
//!    One difference from RE2: `\d`, `\w`, `\s` and `\b` are Unicode-aware here (`\w` takes `é`), ASCII in RE2.
//! 3. **Lookup**: keys are compared as values (0.0 equals −0.0, every NaN equals NaN), strings by handle; the
//!    first of equal keys wins.
//! 4. **Split** as Python's `str.split`: no delimiter (or an empty one) splits on runs of whitespace and drops it at
//!    both ends; a delimiter splits at each occurrence, so neighbours give empty strings; at most `maxsplit` splits,
//!    the rest of the text kept whole. Rows are padded with empty strings to the longest.
//! 5. **Stop words** (`StringNormalizer`) are removed before the case changes, compared in lower case unless
//!    `is_case_sensitive`; when none is left the output is one empty string (`[1]`, or `[1, 1]` for `[1, C]`).
//! 6. **Casts**: a string becomes a number as Rust parses it, also `inf`, `-INF`, `NaN` in any case for floats and
//!    a leading `+`; surrounding whitespace is not trimmed (text that is not a number is an error naming it).
//!    Numbers become their shortest text that reads back the same (`0.1`, `1e-7` as `1e-07`, `NaN`, `INF`,
//!    `-INF`), booleans `0`/`1`.

use std::collections::HashMap;

use regex::Regex;
use stowage_runtime::{strings, DatumType, RuntimeError, Tensor};

use crate::consts;

/// Why a string op could not compute its output.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// A tensor operation failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// `Cast` of a string that is not a number of the type (rule 6).
    #[error("element {index} is {text:?}, which is not a {to} number")]
    NotANumber {
        /// Row-major position.
        index: usize,
        /// The text.
        text: String,
        /// The type cast to.
        to: DatumType,
    },
    /// An output larger than one value may be (`StringSplit`'s padded parts), refused before it is made.
    #[error("its output would be {shape:?} strings, {bytes} bytes of handles: more than the {limit}-byte limit on one value")]
    TooLarge {
        /// The output's shape.
        shape: Vec<usize>,
        /// Its bytes.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
}

type Result<T> = std::result::Result<T, TextError>;

/// The strings of `t`.
fn texts(t: &Tensor<'_>) -> Result<Vec<&'static str>> {
    Ok(strings::resolve_all(&strings::handles(t)?))
}

/// `StringConcat`: each pair of `a` and `b`, broadcast to `out`, joined.
pub fn concat(a: &Tensor<'_>, b: &Tensor<'_>, out: &[usize]) -> Result<Tensor<'static>> {
    let count = out.iter().product();
    let (x, y) = (texts(a)?, texts(b)?);
    let x = super::arith::broadcast_read(&x, a.shape(), out, count);
    let y = super::arith::broadcast_read(&y, b.shape(), out, count);
    let joined: Vec<u32> = x.iter().zip(&y).map(|(p, q)| strings::intern(&[*p, *q].concat())).collect();
    Ok(strings::tensor(out, &joined)?)
}

/// `Equal` of two string tensors broadcast to `out`: equal handles (rule 1 of `strings`).
pub fn equal(a: &Tensor<'_>, b: &Tensor<'_>, out: &[usize]) -> Result<Tensor<'static>> {
    let count = out.iter().product();
    let x = super::arith::broadcast_read(&strings::handles(a)?, a.shape(), out, count);
    let y = super::arith::broadcast_read(&strings::handles(b)?, b.shape(), out, count);
    Ok(Tensor::from_vec(out, x.iter().zip(&y).map(|(p, q)| p == q).collect::<Vec<bool>>())?)
}

/// The regular expression `RegexFullMatch` runs for `pattern` (rule 2). The pattern is read alone first, so that
/// one that only reads as a whole inside the anchoring group (`a)|(b`) is refused rather than changed.
pub fn full_pattern(pattern: &str) -> std::result::Result<Regex, regex::Error> {
    Regex::new(pattern)?;
    Regex::new(&format!(r"\A(?:{pattern})\z"))
}

/// `RegexFullMatch` with the expression [`full_pattern`] made.
pub fn full_match(re: &Regex, x: &Tensor<'_>) -> Result<Tensor<'static>> {
    Ok(Tensor::from_vec(x.shape(), texts(x)?.iter().map(|s| re.is_match(s)).collect::<Vec<bool>>())?)
}

/// Each string in upper or lower case (rule 1).
pub fn change_case(x: &Tensor<'_>, upper: bool) -> Result<Tensor<'static>> {
    let cased: Vec<u32> =
        texts(x)?.iter().map(|s| strings::intern(&if upper { s.to_uppercase() } else { s.to_lowercase() })).collect();
    Ok(strings::tensor(x.shape(), &cased)?)
}

/// `LabelEncoder`'s table (rule 3), built once from its constant keys, values and default.
#[derive(Debug)]
pub struct Table {
    index: HashMap<u64, usize>,
    values: Vec<u8>,
    default: Vec<u8>,
    dt: DatumType,
}

/// A key as a comparable word: a float's value with one zero and one NaN, anything else its bytes.
fn keys_of(t: &Tensor<'_>) -> Result<Vec<u64>> {
    if t.dt().is_float() {
        return Ok(consts::to_f64s(t)?
            .into_iter()
            .map(|v| if v.is_nan() { f64::NAN.to_bits() } else { (v + 0.0).to_bits() })
            .collect());
    }
    let size = t.dt().size_of();
    let mut bytes = vec![0u8; t.len() * size];
    t.write_row_major(&mut bytes)?;
    Ok(bytes
        .chunks_exact(size)
        .map(|b| {
            let mut word = [0u8; 8];
            word[..size].copy_from_slice(b);
            u64::from_le_bytes(word)
        })
        .collect())
}

impl Table {
    /// The table of `keys` (1-D), `values` (as many) and `default` (one value of the values' type).
    pub fn new(keys: &Tensor<'_>, values: &Tensor<'_>, default: &Tensor<'_>) -> Result<Table> {
        let mut index = HashMap::new();
        for (i, k) in keys_of(keys)?.into_iter().enumerate() {
            index.entry(k).or_insert(i);
        }
        let (values, default) = (values.to_row_major()?, default.to_row_major()?);
        Ok(Table { index, values: values.as_bytes()?.to_vec(), default: default.as_bytes()?.to_vec(), dt: values.dt() })
    }

    /// Each element of `x` looked up.
    pub fn apply(&self, x: &Tensor<'_>) -> Result<Tensor<'static>> {
        let size = self.dt.size_of();
        let mut out = Vec::with_capacity(x.len() * size);
        for k in keys_of(x)? {
            match self.index.get(&k) {
                Some(&i) => out.extend_from_slice(&self.values[i * size..(i + 1) * size]),
                None => out.extend_from_slice(&self.default),
            }
        }
        Ok(Tensor::from_bytes(self.dt, x.shape(), &out)?)
    }
}

/// `StringSplit` of `x` (rule 4): the parts, padded, of shape `x.shape + [most parts]`, and each string's count. An
/// output of more than `limit` bytes is refused before it is made.
pub fn split(
    x: &Tensor<'_>,
    delimiter: Option<&str>,
    maxsplit: Option<usize>,
    limit: usize,
) -> Result<(Tensor<'static>, Tensor<'static>)> {
    let texts = texts(x)?;
    let parts_of = |s: &'static str| -> Vec<&'static str> {
        match delimiter.filter(|d| !d.is_empty()) {
            Some(d) => match maxsplit {
                Some(m) => s.splitn(m.saturating_add(1), d).collect(),
                None => s.split(d).collect(),
            },
            None => split_whitespace(s, maxsplit),
        }
    };
    // The width first, counted without keeping the parts, so that the padded output is checked before it exists.
    let counts: Vec<usize> = texts.iter().map(|s| parts_of(s).len()).collect();
    let width = counts.iter().copied().max().unwrap_or(0);
    let mut shape = x.shape().to_vec();
    shape.push(width);
    let bytes = texts.len().saturating_mul(width).saturating_mul(4);
    if bytes > limit {
        return Err(TextError::TooLarge { shape, bytes, limit });
    }
    let mut parts = Vec::with_capacity(texts.len() * width);
    for s in &texts {
        let row = parts_of(s);
        parts.extend(row.iter().map(|s| strings::intern(s)));
        parts.extend(std::iter::repeat_n(0, width - row.len()));
    }
    let counts: Vec<i64> = counts.iter().map(|&c| c as i64).collect();
    Ok((strings::tensor(&shape, &parts)?, Tensor::from_vec(x.shape(), counts)?))
}

fn split_whitespace(s: &str, maxsplit: Option<usize>) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        if maxsplit == Some(parts.len()) {
            parts.push(rest);
            break;
        }
        match rest.find(char::is_whitespace) {
            Some(i) => {
                parts.push(&rest[..i]);
                rest = rest[i..].trim_start();
            }
            None => {
                parts.push(rest);
                break;
            }
        }
    }
    parts
}

/// `StringNormalizer` of `x` (`[C]` or `[1, C]`, rule 5): stop words removed, then the case changed (`Some(true)`
/// upper, `Some(false)` lower).
pub fn normalize(
    x: &Tensor<'_>,
    stopwords: &[String],
    case_sensitive: bool,
    case: Option<bool>,
) -> Result<Tensor<'static>> {
    let fold = |s: &str| if case_sensitive { s.to_string() } else { s.to_lowercase() };
    let stop: std::collections::HashSet<String> = stopwords.iter().map(|s| fold(s)).collect();
    let kept: Vec<&str> = texts(x)?.into_iter().filter(|s| !stop.contains(&fold(s))).collect();
    let kept: Vec<String> = kept
        .into_iter()
        .map(|s| match case {
            Some(true) => s.to_uppercase(),
            Some(false) => s.to_lowercase(),
            None => s.to_string(),
        })
        .collect();
    let kept = if kept.is_empty() { vec![String::new()] } else { kept };
    let shape = if x.shape().len() == 2 { vec![1, kept.len()] } else { vec![kept.len()] };
    Ok(strings::tensor_of(&shape, &kept)?)
}

/// `Cast` of strings to the numbers of `to` (rule 6).
pub fn parse(x: &Tensor<'_>, to: DatumType) -> Result<Tensor<'static>> {
    let texts = texts(x)?;
    let bad = |index: usize, text: &str| TextError::NotANumber { index, text: text.to_string(), to };
    if to.is_float() || to.is_small() {
        let values = texts
            .iter()
            .enumerate()
            .map(|(i, s)| parse_float(s).ok_or_else(|| bad(i, s)))
            .collect::<Result<Vec<f64>>>()?;
        return Ok(consts::from_f64s(to, x.shape(), &values)?);
    }
    if to == DatumType::Bool {
        // ONNX reads a string as a bool through a float: "0" and "0.0" are false, any other number true.
        let values = texts
            .iter()
            .enumerate()
            .map(|(i, s)| parse_float(s).map(|v| f64::from(u8::from(v != 0.0))).ok_or_else(|| bad(i, s)))
            .collect::<Result<Vec<f64>>>()?;
        return Ok(consts::from_f64s(to, x.shape(), &values)?);
    }
    let values = texts
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let s2 = s.strip_prefix('+').unwrap_or(s);
            match to {
                DatumType::U64 => s2.parse::<u64>().map(|v| v as i64).ok(),
                _ => s2.parse::<i64>().ok(),
            }
            .ok_or_else(|| bad(i, s))
        })
        .collect::<Result<Vec<i64>>>()?;
    Ok(consts::from_i64s(to, x.shape(), &values)?)
}

fn parse_float(s: &str) -> Option<f64> {
    let body = s.strip_prefix('+').unwrap_or(s);
    if body.starts_with(['+', '-']) && s.starts_with('+') {
        return None;
    }
    body.parse::<f64>().ok()
}

/// `Cast` of numbers to strings (rule 6).
pub fn print(x: &Tensor<'_>) -> Result<Tensor<'static>> {
    let dt = x.dt();
    let text: Vec<String> = if dt.is_float() || dt.is_small() {
        let values = consts::to_f64s(x)?;
        values.into_iter().map(|v| print_float(v, dt)).collect()
    } else if dt == DatumType::U64 {
        x.to_row_major()?
            .as_bytes()?
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()).to_string())
            .collect()
    } else {
        consts::to_i64s(x)?.into_iter().map(|v| v.to_string()).collect()
    };
    Ok(strings::tensor_of(x.shape(), &text)?)
}

fn print_float(v: f64, dt: DatumType) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "INF".into() } else { "-INF".into() };
    }
    // The shortest text that reads back as the same value of the type: f32's digits for the narrower types.
    let (plain, sci) = if dt == DatumType::F64 {
        (format!("{v}"), format!("{v:e}"))
    } else {
        let f = v as f32;
        (format!("{f}"), format!("{f:e}"))
    };
    let magnitude = v.abs();
    if magnitude != 0.0 && !(1e-4..1e16).contains(&magnitude) {
        // `1e-7` as `1e-07`: an exponent of at least two digits, with its sign.
        let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
        let (sign, digits) = exp.strip_prefix('-').map_or(("+", exp), |d| ("-", d));
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    plain
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(shape: &[usize], s: &[&str]) -> Tensor<'static> {
        strings::tensor_of(shape, s).unwrap()
    }

    fn read(t: &Tensor<'_>) -> Vec<&'static str> {
        texts(t).unwrap()
    }

    #[test]
    fn concatenation_broadcasts_and_keeps_characters_whole() {
        let y = concat(&strs(&[2], &["的", "a"]), &strs(&[1], &["中"]), &[2]).unwrap();
        assert_eq!(read(&y), ["的中", "a中"]);
    }

    #[test]
    fn a_full_match_is_anchored_at_both_ends() {
        assert!(full_pattern("a)|(b").is_err());
        let re = full_pattern("a|ab").unwrap();
        let y = full_match(&re, &strs(&[3], &["ab", "abc", "xab"])).unwrap();
        assert_eq!(y.to_vec::<bool>().unwrap(), [true, false, false]);
    }

    #[test]
    fn lookup_of_floats_takes_zero_and_nan_as_values() {
        let keys = Tensor::from_vec(&[3], vec![0.0f32, f32::NAN, 2.5]).unwrap();
        let values = strs(&[3], &["zero", "nan", "two"]);
        let table = Table::new(&keys, &values, &strs(&[1], &["?"])).unwrap();
        let y = table.apply(&Tensor::from_vec(&[4], vec![-0.0f32, f32::NAN, 2.5, 1.0]).unwrap()).unwrap();
        assert_eq!(read(&y), ["zero", "nan", "two", "?"]);
    }

    #[test]
    fn split_follows_python() {
        let x = strs(&[3], &["  a b  c ", "x,,y", ""]);
        let (parts, counts) = split(&x, None, Some(1), 1 << 20).unwrap();
        assert_eq!(read(&parts), ["a", "b  c ", "x,,y", "", "", ""]);
        assert_eq!(counts.to_vec::<i64>().unwrap(), [2, 1, 0]);
        let (parts, counts) = split(&x, Some(","), None, 1 << 20).unwrap();
        assert!(matches!(split(&x, Some(","), None, 35), Err(TextError::TooLarge { bytes: 36, .. })));
        assert_eq!(parts.shape(), [3, 3]);
        assert_eq!(read(&parts)[3..6], ["x", "", "y"]);
        assert_eq!(counts.to_vec::<i64>().unwrap(), [1, 3, 1]);
    }

    #[test]
    fn stop_words_go_before_the_case_changes_and_none_left_is_one_empty_string() {
        let x = strs(&[1, 3], &["Monday", "tuesday", "MONDAY"]);
        let y = normalize(&x, &["monday".into()], false, Some(true)).unwrap();
        assert_eq!((y.shape().to_vec(), read(&y)), (vec![1, 1], vec!["TUESDAY"]));
        let y = normalize(&strs(&[1], &["monday"]), &["monday".into()], true, None).unwrap();
        assert_eq!((y.shape().to_vec(), read(&y)), (vec![1], vec![""]));
    }

    #[test]
    fn casts_parse_and_print_numbers() {
        let x = strs(&[4], &["1.5", "-inf", "NaN", "+2"]);
        let y = parse(&x, DatumType::F32).unwrap().to_vec::<f32>().unwrap();
        assert_eq!((y[0], y[1], y[3]), (1.5, f32::NEG_INFINITY, 2.0));
        assert!(y[2].is_nan());
        assert!(matches!(parse(&strs(&[1], &["1.5x"]), DatumType::I64), Err(TextError::NotANumber { index: 0, .. })));
        let z = print(&Tensor::from_vec(&[4], vec![0.1f32, 1e-7, f32::NEG_INFINITY, 3.0]).unwrap()).unwrap();
        assert_eq!(read(&z), ["0.1", "1e-07", "-INF", "3"]);
    }
}
