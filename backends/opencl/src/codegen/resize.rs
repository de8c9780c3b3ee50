//! Resize, one axis per launch: the CPU backend's interpolation tables (`stowage_kir::resize::plan_axis`:
//! per output coordinate, the input coordinates of its taps and their weights) compiled into the kernel as
//! constant arrays, so the two backends interpolate from the same plan.

use std::fmt::Write;

use stowage_kir::resize::AxisPlan;

use super::lit;

/// Interpolation along one axis of a packed `[outer, in_len, inner]` tensor stored as `t` ([`super::dt_storage`],
/// interpolated in float) into `[outer, out_len, inner]`: kernel `name(X, Y)`, one work item per output element. An
/// output coordinate outside the input (`tf_crop_and_resize`) gets `extrapolation`.
pub fn resize_axis(name: &str, plan: &AxisPlan, in_len: usize, inner: usize, extrapolation: f32, t: &str) -> String {
    let out_len = plan.extrapolate.len();
    let taps = plan.taps.max(1);
    let mut idx = String::new();
    let mut coef = String::new();
    for o in 0..out_len {
        for j in 0..taps {
            let k = o * taps + j;
            // -1 marks an output that extrapolates.
            let i = if plan.extrapolate[o] { -1 } else { plan.idx.get(k).map_or(-1, |&i| i as i64) };
            let _ = write!(idx, "{i},");
            let _ = write!(coef, "{},", lit(plan.coef.get(k).copied().unwrap_or(0.0) as f32));
        }
    }
    format!(
        "__constant int {name}_idx[{n}] = {{{idx}}};\n__constant float {name}_coef[{n}] = {{{coef}}};\n\
         __kernel void {name}(__global const {pt}* restrict X, __global {pt}* restrict Y) {{\n  \
         const size_t g = get_global_id(0), i = g % {inner}, o = g / {inner} % {out_len}, b = g / ({inner} * {out_len});\n  \
         if ({name}_idx[o * {taps}] < 0) {{ {extra} return; }}\n  float acc = 0.0f;\n  \
         for (int j = 0; j < {taps}; ++j) acc = fma({name}_coef[o * {taps} + j], {x}, acc);\n  \
         {y}\n}}\n",
        n = out_len * taps,
        pt = super::param_type(t),
        extra = super::store(t, "Y", "g", &lit(extrapolation)),
        x = super::load(t, "X", &format!("(b * {in_len} + {name}_idx[o * {taps} + j]) * {inner} + i")),
        y = super::store(t, "Y", "g", "acc"),
    )
}
