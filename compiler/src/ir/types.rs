//! The static type of a value: a datum type and a fully known shape.

use std::fmt;

use stowage_runtime::DatumType;

/// Datum type and shape of a value. Every dimension is known after import.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ValueType {
    /// Element type.
    #[serde(with = "super::serial::datum_type")]
    pub dt: DatumType,
    /// Dimensions, outermost first. Empty for a scalar.
    pub shape: Vec<usize>,
}

impl ValueType {
    /// A value type.
    pub fn new(dt: DatumType, shape: impl Into<Vec<usize>>) -> Self {
        ValueType { dt, shape: shape.into() }
    }

    /// Number of elements, `None` on overflow.
    pub fn element_count(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// Size in bytes when packed, `None` on overflow.
    pub fn byte_len(&self) -> Option<usize> {
        self.element_count()?.checked_mul(self.dt.size_of())
    }

    /// Rank (number of axes).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

/// Prints a shape as `[1,3,224,224]`.
pub struct ShapeDisplay<'a>(pub &'a [usize]);

impl fmt::Display for ShapeDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dt, ShapeDisplay(&self.shape))
    }
}
