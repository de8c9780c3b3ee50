//! Layout assignment. Values the compiler makes are packed row-major (constants are laid out at compile time, for
//! free); a graph input may carry the caller's layout (`--input-layout NAME=nhwc,row-pitch=2048`, or
//! [`super::PlanOptions::input_layout`]). Such an input is read in place by every kernel that accepts its layout,
//! and relaid once, for all the kernels that do not, by the copy pass.

use stowage_runtime::{DatumType, LayoutSupport, HOST_ALIGNMENT};

use super::target::Accepts;

/// How a caller's input is laid out in memory.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InputLayout {
    /// The declared axes from outermost to innermost in memory (the identity: row-major).
    pub order: Vec<usize>,
    /// Bytes from one row to the next, where rows are padded; `None`: packed.
    pub row_pitch: Option<usize>,
    /// Where the pitch applies: the position, in `order`, of the axis whose step is the row pitch (the axes after
    /// it, packed, make a row). Rows are the innermost axis (position rank - 2) unless the layout says `nhwc`,
    /// whose rows are lines of pixels, W × C (position 1).
    pub row_axis: usize,
    /// The alignment the caller's base address is known to have, bytes.
    pub alignment: usize,
    /// Element strides, when the caller's memory is no order with a row pitch (a view sliced along several axes,
    /// a broadcast): only kernels compiled for any strides read it in place.
    pub strided: Option<Vec<usize>>,
    /// The memory is part of a larger buffer (a slice): devices that import whole host buffers copy it.
    pub view: bool,
}

impl InputLayout {
    /// Packed row-major at the host's alignment: what a caller gives unless told otherwise.
    pub fn packed(rank: usize) -> InputLayout {
        InputLayout {
            order: (0..rank).collect(),
            row_pitch: None,
            row_axis: rank.saturating_sub(2),
            alignment: HOST_ALIGNMENT,
            strided: None,
            view: false,
        }
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
                    "nhwc" => {
                        layout.order = (0..rank).collect();
                        layout.row_axis = 1;
                    }
                    "nchw" | "nc" => layout.order = (0..rank).collect(),
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
            if shape.len() < 2 || self.row_axis + 1 >= shape.len() {
                return Err(format!("row-pitch={pitch}: a {}-axis input has no rows to pad", shape.len()));
            }
            let row_dims: Vec<usize> = self.order[self.row_axis + 1..].iter().map(|&a| shape[a]).collect();
            let row = row_dims.iter().product::<usize>() * dt.size_of();
            if pitch < row {
                let dims: Vec<String> = row_dims.iter().map(usize::to_string).collect();
                return Err(format!(
                    "row-pitch={pitch} is shorter than a packed row of {row} bytes ({} × {dt})",
                    dims.join(" × ")
                ));
            }
            if !pitch.is_multiple_of(dt.size_of()) {
                return Err(format!("row-pitch={pitch} is not a whole number of {}-byte {dt} elements", dt.size_of()));
            }
            if self.checked_strides(dt, shape).is_none() {
                return Err(format!("row-pitch={pitch}: the input would span more memory than an address reaches"));
            }
        }
        Ok(())
    }

    /// The same memory described without axes of extent 1, which are never stepped: a column-major `[1, N]` is
    /// row-major, and a pitch between rows of which there is one is no padding.
    pub fn simplified(&self, shape: &[usize]) -> InputLayout {
        let mut l = self.clone();
        let stepped: Vec<usize> = l.order.iter().copied().filter(|&a| shape.get(a).is_some_and(|&d| d > 1)).collect();
        let extent = |k: usize| self.order.get(k).and_then(|&a| shape.get(a)).copied().unwrap_or(1);
        if l.row_pitch.is_some() && extent(l.row_axis) <= 1 {
            // The pitch is the step of the row axis. Where that axis has one index, the next axis out with more
            // steps by pitch × 1: the pitch moves out to it, or goes when no axis out has more than one.
            match (0..l.row_axis).rev().find(|&k| extent(k) > 1) {
                Some(k) => l.row_axis = k,
                None => l.row_pitch = None,
            }
        }
        if stepped.windows(2).all(|w| w[0] < w[1]) {
            let axis = l.order.get(l.row_axis).copied();
            l.order = (0..shape.len()).collect();
            l.row_axis = axis.unwrap_or(l.row_axis);
        }
        l
    }

    /// Element strides of the layout for `shape` (axis order as declared). The layout must have passed
    /// [`InputLayout::check`] for `shape`.
    pub fn strides(&self, dt: DatumType, shape: &[usize]) -> Vec<usize> {
        if let Some(s) = &self.strided {
            return s.clone();
        }
        self.checked_strides(dt, shape).unwrap_or_else(|| vec![0; shape.len()])
    }

    /// The strides, or `None` when the memory they span does not fit in an address.
    fn checked_strides(&self, dt: DatumType, shape: &[usize]) -> Option<Vec<usize>> {
        let mut strides = vec![0; shape.len()];
        let mut step = 1usize;
        for (k, &axis) in self.order.iter().enumerate().rev() {
            if let (Some(pitch), true) = (self.row_pitch, k == self.row_axis) {
                step = pitch / dt.size_of();
            }
            *strides.get_mut(axis)? = step;
            step = step.checked_mul(shape.get(axis)?.max(&1).to_owned())?;
        }
        step.checked_mul(dt.size_of())?;
        Some(strides)
    }

    /// The kind of layout, as descriptors and kernels name them (`None`: another order, readable only by kernels
    /// that take any strides).
    pub fn kind(&self) -> Option<LayoutSupport> {
        if self.strided.is_some() {
            return None;
        }
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
        let order = match (&self.strided, self.kind()) {
            (Some(s), _) => format!("element strides {s:?}"),
            (None, Some(LayoutSupport::RowMajor) | Some(LayoutSupport::PaddedRows)) => "row-major".to_string(),
            (None, Some(LayoutSupport::ColumnMajor)) => "column-major".to_string(),
            (None, None) => format!("order {}", self.order.iter().map(usize::to_string).collect::<Vec<_>>().join(".")),
        };
        let order = if self.view { format!("{order}, part of a larger buffer") } else { order };
        let pitch = match (self.row_pitch, self.order.get(self.row_axis)) {
            (Some(p), Some(axis)) => format!(", rows padded to {p} bytes at axis {axis}"),
            _ => String::new(),
        };
        format!("{order}{pitch}, {}-byte aligned", self.alignment)
    }
}
