//! Layout assignment. Values the compiler makes are packed row-major (constants are laid out at compile time, for
//! free); a graph input may carry the caller's layout (`--input-layout NAME=nhwc,row-pitch=2048`, or
//! [`super::PlanOptions::input_layout`]). Such an input is read in place by every kernel that accepts its layout,
//! and relaid once, for all the kernels that do not, by the copy pass.

use stowage_runtime::{DatumType, LayoutSupport, HOST_ALIGNMENT};

use super::target::Accepts;

/// How a caller's input is laid out in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputLayout {
    /// The declared axes from outermost to innermost in memory (the identity: row-major).
    pub order: Vec<usize>,
    /// Bytes from one row to the next, where rows (the innermost memory axis) are padded; `None`: packed.
    pub row_pitch: Option<usize>,
    /// The alignment the caller's base address is known to have, bytes.
    pub alignment: usize,
}

impl InputLayout {
    /// Packed row-major at the host's alignment: what a caller gives unless told otherwise.
    pub fn packed(rank: usize) -> InputLayout {
        InputLayout { order: (0..rank).collect(), row_pitch: None, alignment: HOST_ALIGNMENT }
    }

    /// Parses the CLI's form, for an input of `rank` axes: comma-separated words, in any order:
    /// - the memory order: `row-major` (the declared order; `nchw`, `nhwc` and `nc` are accepted as names of the
    ///   declared order of a 4-D or 2-D input), `column-major` (reversed), or `order=0.2.3.1` (the declared axes
    ///   from outermost to innermost in memory);
    /// - `row-pitch=BYTES`: rows of the innermost memory axis padded to that many bytes;
    /// - `align=BYTES`: the alignment of the caller's base address (default 64).
    pub fn parse(text: &str, rank: usize) -> Result<InputLayout, String> {
        let mut layout = InputLayout::packed(rank);
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let number = |v: &str| v.parse::<usize>().map_err(|_| format!("'{word}': '{v}' is not a number of bytes"));
            match word.split_once('=') {
                Some(("row-pitch", v)) => layout.row_pitch = Some(number(v)?),
                Some(("align", v)) => {
                    let a = number(v)?;
                    if !a.is_power_of_two() {
                        return Err(format!("'{word}': an alignment is a power of two"));
                    }
                    layout.alignment = a;
                }
                Some(("order", v)) => {
                    let order: Result<Vec<usize>, _> = v.split('.').map(str::parse).collect();
                    layout.order = order.map_err(|_| format!("'{word}': axes are numbers joined by '.'"))?;
                }
                Some(_) => return Err(format!("unknown layout word '{word}' (row-major, column-major, nchw, nhwc, order=, row-pitch=, align=)")),
                None => match word {
                    "row-major" => layout.order = (0..rank).collect(),
                    "nchw" | "nhwc" if rank != 4 => {
                        return Err(format!("'{word}' names 4 axes, the input has {rank}"));
                    }
                    "nc" if rank != 2 => return Err(format!("'{word}' names 2 axes, the input has {rank}")),
                    "nchw" | "nhwc" | "nc" => layout.order = (0..rank).collect(),
                    "column-major" => layout.order = (0..rank).rev().collect(),
                    _ => return Err(format!("unknown layout word '{word}' (row-major, column-major, nchw, nhwc, order=, row-pitch=, align=)")),
                },
            }
        }
        let mut seen = vec![false; rank];
        if layout.order.len() != rank
            || !layout.order.iter().all(|&a| a < rank && !std::mem::replace(&mut seen[a], true))
        {
            return Err(format!("order {:?} is not an order of the input's {rank} axes", layout.order));
        }
        Ok(layout)
    }

    /// Checks the layout against the input's type: a row pitch holds a whole packed row, in whole elements.
    pub fn check(&self, dt: DatumType, shape: &[usize]) -> Result<(), String> {
        if self.order.len() != shape.len() {
            return Err(format!("the layout has {} axes, the input {}", self.order.len(), shape.len()));
        }
        if let Some(pitch) = self.row_pitch {
            let Some(&inner) = self.order.last() else {
                return Err("a scalar has no rows to pad".into());
            };
            if shape.len() < 2 {
                return Err(format!("row-pitch={pitch}: a {}-axis input has no rows to pad", shape.len()));
            }
            let row = shape[inner] * dt.size_of();
            if pitch < row {
                return Err(format!(
                    "row-pitch={pitch} is shorter than a packed row of {row} bytes ({} × {dt})",
                    shape[inner]
                ));
            }
            if !pitch.is_multiple_of(dt.size_of()) {
                return Err(format!("row-pitch={pitch} is not a whole number of {}-byte {dt} elements", dt.size_of()));
            }
        }
        Ok(())
    }

    /// Element strides of the layout for `shape` (axis order as declared).
    pub fn strides(&self, dt: DatumType, shape: &[usize]) -> Vec<usize> {
        let mut strides = vec![0; shape.len()];
        let mut step = 1usize;
        for (k, &axis) in self.order.iter().enumerate().rev() {
            strides[axis] = step;
            step *= shape[axis].max(1);
            if k + 1 == self.order.len() {
                if let Some(pitch) = self.row_pitch {
                    step = pitch / dt.size_of();
                }
            }
        }
        strides
    }

    /// The kind of layout, as descriptors and kernels name them (`None`: another order, readable only by kernels
    /// that take any strides).
    pub fn kind(&self) -> Option<LayoutSupport> {
        let identity = self.order.iter().enumerate().all(|(i, &a)| i == a);
        let reversed = self.order.iter().rev().enumerate().all(|(i, &a)| i == a);
        match (self.row_pitch, identity, reversed) {
            (None, true, _) => Some(LayoutSupport::RowMajor),
            (Some(_), true, _) => Some(LayoutSupport::PaddedRows),
            (None, false, true) => Some(LayoutSupport::ColumnMajor),
            _ => None,
        }
    }

    /// True when packed row-major.
    pub fn is_packed(&self) -> bool {
        self.kind() == Some(LayoutSupport::RowMajor)
    }

    /// True when a kernel that `accepts` reads this layout in place.
    pub fn read_in_place_by(&self, accepts: &Accepts) -> bool {
        match self.kind() {
            Some(kind) => accepts.layouts.contains(&kind),
            // Any strides: only kernels generated for the strides, which take every kind.
            None => accepts.at_lowering && accepts.layouts.len() == 3,
        }
    }

    /// A short description: `row-major`, `rows padded to 2048 bytes`, `order 0.2.3.1`, with the alignment.
    pub fn describe(&self) -> String {
        let order = match self.kind() {
            Some(LayoutSupport::RowMajor) | Some(LayoutSupport::PaddedRows) => "row-major".to_string(),
            Some(LayoutSupport::ColumnMajor) => "column-major".to_string(),
            None => format!("order {}", self.order.iter().map(usize::to_string).collect::<Vec<_>>().join(".")),
        };
        let pitch = self.row_pitch.map(|p| format!(", rows padded to {p} bytes")).unwrap_or_default();
        format!("{order}{pitch}, {}-byte aligned", self.alignment)
    }
}
