//! The ops on strings ([`Op::Text`](super::Op::Text)) and `LabelEncoder`'s lookup, which takes every element type.
//!
//! Strings are handles into the process's string table (`stowage_runtime::strings`), so the ops that only move,
//! select or compare elements (Reshape, Gather, Concat, Where, Equal, …) take strings as they are; these are the ops
//! that read the text itself. Each is computed by `crate::eval::text`, for folding and for the CPU's kernels alike.

use std::fmt;

/// One op on strings.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Text {
    /// `StringConcat`: X, Y of strings, broadcast; each pair joined.
    Concat,
    /// `RegexFullMatch`: X of strings → bool, true where the whole string matches `pattern` (RE2 syntax).
    FullMatch {
        /// The pattern, as the model gives it.
        pattern: String,
    },
    /// `StringNormalizer` without stop words: X of strings, each in lower or upper case.
    Case {
        /// Upper case (else lower).
        upper: bool,
    },
    /// `LabelEncoder` (`ai.onnx.ml`): X, keys, values, default. Each element of X found among `keys` (equal values;
    /// every NaN equal to NaN) is the value at the same position, any other `default`. Keys and X share a type,
    /// values and default another; strings are one of them or both.
    Lookup,
}

impl Text {
    /// The ONNX name of the op.
    pub fn name(&self) -> &'static str {
        match self {
            Text::Concat => "StringConcat",
            Text::FullMatch { .. } => "RegexFullMatch",
            Text::Case { .. } => "StringNormalizer",
            Text::Lookup => "LabelEncoder",
        }
    }

    /// Inputs: at least, at most.
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Text::Concat => (2, 2),
            Text::FullMatch { .. } | Text::Case { .. } => (1, 1),
            Text::Lookup => (4, 4),
        }
    }

    /// Inputs that must be constants: the lookup's table.
    pub fn static_inputs(&self) -> &'static [usize] {
        match self {
            Text::Lookup => &[1, 2, 3],
            _ => &[],
        }
    }
}

impl fmt::Display for Text {
    /// The attributes, as the text form prints them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Text::FullMatch { pattern } => write!(f, "pattern={pattern:?}"),
            Text::Case { upper } => f.write_str(if *upper { "case=upper" } else { "case=lower" }),
            Text::Concat | Text::Lookup => Ok(()),
        }
    }
}
