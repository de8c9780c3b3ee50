//! The `ai.onnx.ml` domain (versions 1 to 5), as scikit-learn, LightGBM and XGBoost models exported by skl2onnx
//! and onnxmltools use it: the tree ensembles, the linear models and the feature transforms, imported as
//! [`super::expand`] writes every other expansion. The rules, each as onnxruntime computes it:
//! 1. **Trees** (`TreeEnsemble` of version 5; `TreeEnsembleRegressor` and `TreeEnsembleClassifier` of versions 1–3)
//!    become one [`Op::TreeEnsemble`] (`ir/trees.rs`): nodes found by `(tree id, node id)`, a tree's roots are its
//!    nodes no other node leads to, a leaf's votes are the `target_*`/`class_*` entries naming it. Attribute lists
//!    that must run in step and disagree in length, a child that names no node, a vote for a node that is not a
//!    leaf, and a cycle are errors naming the attributes or the node.
//! 2. **Scores**: base values are added after aggregation; then the post-transform: `LOGISTIC` (sigmoid),
//!    `SOFTMAX`, `SOFTMAX_ZERO` (softmax over the non-zero scores, zeros kept). `PROBIT` is refused by name.
//! 3. **Classes**: the label is the class label at the argmax of the scores before the post-transform (first on
//!    ties). A binary classifier with one column of scores `s` (`TreeEnsembleClassifier` with one class id,
//!    `LinearClassifier` with one row of coefficients and two labels) writes onnxruntime's two columns: `v` is
//!    `sigmoid(s)` under `LOGISTIC` and `s` under any other post-transform (none is applied), the scores `[1 − v, v]`,
//!    or `[−v, v]` for trees whose weights have both signs; the label is the second where `s > 0.5` for trees of
//!    non-negative weights, else where `s > 0`. Class labels are integers or strings (`classlabels_strings`: a string
//!    tensor, `stowage_runtime::strings`).
//! 4. **Inputs** of integer type are cast to f32; scores are f32 (`TreeEnsemble`'s output has its input's type).
//! 5. **Transforms**: `Binarizer` (`x > threshold` as 1 or 0 in `x`'s type), `ArrayFeatureExtractor` (a `Gather`
//!    along the last axis; a 1-D input gives one row), `Scaler` (`(x − offset) · scale`, one value or one per
//!    column), `Normalizer` (each row over its largest value, its L1 or its L2 norm; a row whose divisor is 0 stays),
//!    `LabelEncoder` (one lookup: `text.rs`, rule 3).

use stowage_runtime::DatumType;

use super::expand::{int, Ex};
use crate::error::ImportErrorKind as E;
use crate::ir::trees::{Aggregate, Branch, Child, TreeNode, Trees};
use crate::ir::Op;

/// The domain.
pub const ML_DOMAIN: &str = "ai.onnx.ml";

/// The versions of the domain stowage imports.
pub const ML_VERSIONS: (i64, i64) = (1, 5);

/// The op types of the domain this file expands.
pub const ML_OPS: &[&str] = &[
    "ArrayFeatureExtractor",
    "Binarizer",
    "LabelEncoder",
    "LinearClassifier",
    "LinearRegressor",
    "Normalizer",
    "Scaler",
    "TreeEnsemble",
    "TreeEnsembleClassifier",
    "TreeEnsembleRegressor",
];

/// Expands the op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let x = ex.input(0)?;
    Ok(match ex.node.op_type() {
        "Binarizer" => {
            let dt = ex.ty(&x)?.dt;
            let th = f64::from(ex.attrs().float_or("threshold", 0.0).map_err(|e| ex.attr_err(e))?);
            let th = ex.scalar(dt, th)?;
            let above = ex.op("Greater", &[&x, &th], vec![])?;
            vec![Some(cast(ex, &above, dt)?)]
        }
        "ArrayFeatureExtractor" => {
            let (idx, xt) = (ex.input(1)?, ex.ty(&x)?);
            let flat = ex.ints(&[-1])?;
            let idx = ex.op("Reshape", &[&idx, &flat], vec![])?;
            let y = ex.op("Gather", &[&x, &idx], vec![int("axis", -1)])?;
            if xt.rank() == 1 {
                let row = ex.ints(&[1, -1])?;
                vec![Some(ex.op("Reshape", &[&y, &row], vec![])?)]
            } else {
                vec![Some(y)]
            }
        }
        "Scaler" => vec![Some(scaler(ex, &x)?)],
        "LabelEncoder" => super::text::label_encoder(ex)?,
        "Normalizer" => vec![Some(normalizer(ex, &x)?)],
        "LinearRegressor" | "LinearClassifier" => linear(ex, &x)?,
        "TreeEnsemble" => {
            let trees = trees_v5(ex)?;
            let y = ex.ir_op(Op::TreeEnsemble(Box::new(trees)), &[&x])?;
            let post = ex.attrs().int_or("post_transform", 0).map_err(|e| ex.attr_err(e))?;
            let post = match post {
                0 => "NONE",
                1 => "SOFTMAX",
                2 => "LOGISTIC",
                3 => "SOFTMAX_ZERO",
                4 => "PROBIT",
                other => return Err(ex.attr_fail("post_transform", format!("is {other}: it must be 0 to 4"))),
            };
            vec![Some(post_transform(ex, &y, post)?)]
        }
        "TreeEnsembleRegressor" | "TreeEnsembleClassifier" => tree_v3(ex, &x)?,
        other => return Err(ex.fail(format!("'{other}' has no expansion"))),
    })
}

/// `v` cast to `to`, unless it has that type already.
fn cast(ex: &mut Ex<'_, '_>, v: &str, to: DatumType) -> Result<String, E> {
    if ex.ty(v)?.dt == to {
        return Ok(v.to_string());
    }
    ex.op("Cast", &[v], vec![int("to", i64::from(super::tensor::onnx_type(to) as i32))])
}

/// `x` as floats: f64 stays, everything else becomes f32 (rule 4).
fn floats(ex: &mut Ex<'_, '_>, x: &str) -> Result<String, E> {
    let dt = ex.ty(x)?.dt;
    if dt == DatumType::F64 {
        return Ok(x.to_string());
    }
    cast(ex, x, DatumType::F32)
}

/// A constant of `dt` and `shape` from `values`.
fn constant(ex: &mut Ex<'_, '_>, dt: DatumType, shape: &[usize], values: &[f64]) -> Result<String, E> {
    let t = crate::consts::from_f64s(dt, shape, values).map_err(|e| ex.fail(e.to_string()))?;
    Ok(ex.constant("ml", t))
}

fn floats_attr(ex: &Ex<'_, '_>, name: &str) -> Result<Vec<f64>, E> {
    let a = ex.attrs();
    if let Some(v) = a.floats(name).map_err(|e| ex.attr_err(e))? {
        return Ok(v.into_iter().map(f64::from).collect());
    }
    match a.tensor(&format!("{name}_as_tensor")).map_err(|e| ex.attr_err(e))? {
        Some(t) => crate::consts::to_f64s(&t).map_err(|e| ex.fail(e.to_string())),
        None => Ok(Vec::new()),
    }
}

fn ints_attr(ex: &Ex<'_, '_>, name: &str) -> Result<Vec<i64>, E> {
    Ok(ex.attrs().ints(name).map_err(|e| ex.attr_err(e))?.unwrap_or_default())
}

fn string_attr(ex: &Ex<'_, '_>, name: &str, default: &str) -> Result<String, E> {
    Ok(ex.attrs().string(name).map_err(|e| ex.attr_err(e))?.unwrap_or_else(|| default.to_string()))
}

/// Lists that run in step must have one length (rule 1): the first that differs is named with the first list.
fn same_lengths(ex: &Ex<'_, '_>, lists: &[(&str, usize)]) -> Result<usize, E> {
    let (first, n) = lists[0];
    match lists.iter().find(|(_, len)| *len != n) {
        Some((name, len)) => Err(ex.attr_fail(name, format!("has {len} entries, but {first} has {n}"))),
        None => Ok(n),
    }
}

/// The post-transform `kind` over the scores `s` (rule 2).
fn post_transform(ex: &mut Ex<'_, '_>, s: &str, kind: &str) -> Result<String, E> {
    match kind {
        "NONE" => Ok(s.to_string()),
        "LOGISTIC" => ex.op("Sigmoid", &[s], vec![]),
        "SOFTMAX" => ex.op("Softmax", &[s], vec![int("axis", -1)]),
        "SOFTMAX_ZERO" => {
            let dt = ex.ty(s)?.dt;
            let axes = ex.ints(&[-1])?;
            let max = ex.op("ReduceMax", &[s, &axes], vec![int("keepdims", 1)])?;
            let shifted = ex.op("Sub", &[s, &max], vec![])?;
            let e = ex.op("Exp", &[&shifted], vec![])?;
            let zero = ex.scalar(dt, 0.0)?;
            let is_zero = ex.op("Equal", &[s, &zero], vec![])?;
            let e = ex.op("Where", &[&is_zero, &zero, &e], vec![])?;
            let sum = ex.op("ReduceSum", &[&e, &axes], vec![int("keepdims", 1)])?;
            ex.op("Div", &[&e, &sum], vec![])
        }
        "PROBIT" => Err(ex.attr_fail("post_transform", "is PROBIT, which stowage does not compute (no inverse erf)")),
        other => Err(ex.attr_fail("post_transform", format!("is '{other}': NONE, LOGISTIC, SOFTMAX or SOFTMAX_ZERO"))),
    }
}

/// The label and score outputs of a classifier over the scores `s` (`[N, classes]`), with `labels` (rule 3): the
/// label at the argmax of the scores before the post-transform.
fn classify(ex: &mut Ex<'_, '_>, s: &str, labels: &Labels, post: &str) -> Result<Vec<Option<String>>, E> {
    let arg = ex.op("ArgMax", &[s], vec![int("axis", 1), int("keepdims", 0)])?;
    let table = labels.table(ex)?;
    let label = ex.op("Gather", &[&table, &arg], vec![])?;
    let scores = post_transform(ex, s, post)?;
    let scores = cast(ex, &scores, DatumType::F32)?;
    Ok(vec![Some(label), Some(scores)])
}

/// The label and scores of a binary classifier with one column `s` (`[N, 1]`), as onnxruntime writes them
/// (rule 3): `v` is the logistic of `s` under `LOGISTIC` and `s` itself under every other post-transform; the
/// scores are `[1 − v, v]`, or `[−v, v]` with `negate` (without `LOGISTIC`); the label is the second one where
/// `s > threshold`.
fn binary_classes(
    ex: &mut Ex<'_, '_>,
    s: &str,
    labels: &Labels,
    post: &str,
    negate: bool,
    threshold: f64,
) -> Result<Vec<Option<String>>, E> {
    if post == "PROBIT" {
        return Err(ex.attr_fail("post_transform", "is PROBIT, which stowage does not compute (no inverse erf)"));
    }
    let dt = ex.ty(s)?.dt;
    let v = if post == "LOGISTIC" { ex.op("Sigmoid", &[s], vec![])? } else { s.to_string() };
    let first = if negate && post != "LOGISTIC" {
        ex.op("Neg", &[&v], vec![])?
    } else {
        let one = ex.scalar(dt, 1.0)?;
        ex.op("Sub", &[&one, &v], vec![])?
    };
    let scores = ex.op("Concat", &[&first, &v], vec![int("axis", 1)])?;
    let th = ex.scalar(dt, threshold)?;
    let above = ex.op("Greater", &[s, &th], vec![])?;
    let above = cast(ex, &above, DatumType::I64)?;
    let flat = ex.ints(&[-1])?;
    let idx = ex.op("Reshape", &[&above, &flat], vec![])?;
    let table = labels.table(ex)?;
    let label = ex.op("Gather", &[&table, &idx], vec![])?;
    Ok(vec![Some(label), Some(cast(ex, &scores, DatumType::F32)?)])
}

/// A classifier's class labels: integers, or strings (rule 3).
enum Labels {
    Ints(Vec<i64>),
    Strings(Vec<String>),
}

impl Labels {
    fn len(&self) -> usize {
        match self {
            Labels::Ints(v) => v.len(),
            Labels::Strings(v) => v.len(),
        }
    }

    /// The labels as a constant, for the `Gather` that picks each row's.
    fn table(&self, ex: &mut Ex<'_, '_>) -> Result<String, E> {
        match self {
            Labels::Ints(v) => ex.ints(v),
            Labels::Strings(v) => {
                let t = stowage_runtime::strings::tensor_of(&[v.len()], v).map_err(|e| ex.fail(e.to_string()))?;
                Ok(ex.constant("labels", t))
            }
        }
    }
}

/// The class labels, of integers or strings (rule 3).
fn class_labels(ex: &Ex<'_, '_>, ints: &str, strings: &str) -> Result<Labels, E> {
    let (name, labels) = match ex.attrs().strings(strings).map_err(|e| ex.attr_err(e))? {
        Some(s) => (strings, Labels::Strings(s)),
        None => (ints, Labels::Ints(ints_attr(ex, ints)?)),
    };
    if labels.len() < 2 {
        return Err(ex.attr_fail(name, format!("has {} labels: a classifier needs at least 2", labels.len())));
    }
    Ok(labels)
}

fn scaler(ex: &mut Ex<'_, '_>, x: &str) -> Result<String, E> {
    let xf = cast(ex, x, DatumType::F32)?;
    let cols = ex.ty(x)?.shape.last().copied().unwrap_or(1);
    let mut parts = Vec::new();
    for (name, default) in [("offset", 0.0), ("scale", 1.0)] {
        let mut v = floats_attr(ex, name)?;
        if v.is_empty() {
            v.push(default);
        }
        if v.len() != 1 && v.len() != cols {
            return Err(ex.attr_fail(name, format!("has {} values: one, or one per column ({cols})", v.len())));
        }
        parts.push(constant(ex, DatumType::F32, &[v.len()], &v)?);
    }
    let shifted = ex.op("Sub", &[&xf, &parts[0]], vec![])?;
    ex.op("Mul", &[&shifted, &parts[1]], vec![])
}

fn normalizer(ex: &mut Ex<'_, '_>, x: &str) -> Result<String, E> {
    let xf = cast(ex, x, DatumType::F32)?;
    let axes = ex.ints(&[-1])?;
    let keep = vec![int("keepdims", 1)];
    let div = match string_attr(ex, "norm", "MAX")?.as_str() {
        "MAX" => ex.op("ReduceMax", &[&xf, &axes], keep)?,
        "L1" => {
            let a = ex.op("Abs", &[&xf], vec![])?;
            ex.op("ReduceSum", &[&a, &axes], keep)?
        }
        "L2" => {
            let sq = ex.op("Mul", &[&xf, &xf], vec![])?;
            let sum = ex.op("ReduceSum", &[&sq, &axes], keep)?;
            ex.op("Sqrt", &[&sum], vec![])?
        }
        other => return Err(ex.attr_fail("norm", format!("is '{other}': it must be MAX, L1 or L2"))),
    };
    let zero = ex.scalar(DatumType::F32, 0.0)?;
    let none = ex.op("Equal", &[&div, &zero], vec![])?;
    let y = ex.op("Div", &[&xf, &div], vec![])?;
    ex.op("Where", &[&none, &xf, &y], vec![])
}

/// `LinearRegressor` and `LinearClassifier`: `x · Wᵀ + b`, then scores or classes.
fn linear(ex: &mut Ex<'_, '_>, x: &str) -> Result<Vec<Option<String>>, E> {
    let xf = cast(ex, x, DatumType::F32)?;
    let xt = ex.ty(&xf)?;
    let cols = xt.shape.last().copied().unwrap_or(1);
    let coef = floats_attr(ex, "coefficients")?;
    if cols == 0 || coef.is_empty() || !coef.len().is_multiple_of(cols) {
        return Err(
            ex.attr_fail("coefficients", format!("has {} values: a multiple of the {cols} columns of X", coef.len()))
        );
    }
    let rows = coef.len() / cols;
    let mut b = floats_attr(ex, "intercepts")?;
    if b.is_empty() {
        b = vec![0.0; rows];
    }
    if b.len() != rows {
        return Err(ex.attr_fail("intercepts", format!("has {} values, but coefficients make {rows} rows", b.len())));
    }
    let w = constant(ex, DatumType::F32, &[rows, cols], &coef)?;
    let wt = ex.op("Transpose", &[&w], vec![])?;
    let p = ex.op("MatMul", &[&xf, &wt], vec![])?;
    let b = constant(ex, DatumType::F32, &[rows], &b)?;
    let s = ex.op("Add", &[&p, &b], vec![])?;
    let post = string_attr(ex, "post_transform", "NONE")?;
    if ex.node.op_type() == "LinearRegressor" {
        return Ok(vec![Some(post_transform(ex, &s, &post)?)]);
    }
    let labels = class_labels(ex, "classlabels_ints", "classlabels_strings")?;
    if rows == 1 && labels.len() == 2 {
        return binary_classes(ex, &s, &labels, &post, false, 0.0);
    }
    if rows != labels.len() {
        return Err(ex.attr_fail("coefficients", format!("make {rows} rows, but there are {} labels", labels.len())));
    }
    classify(ex, &s, &labels, &post)
}

fn branch(mode: &str) -> Option<Branch> {
    Some(match mode {
        "BRANCH_LEQ" => Branch::Leq,
        "BRANCH_LT" => Branch::Lt,
        "BRANCH_GTE" => Branch::Gte,
        "BRANCH_GT" => Branch::Gt,
        "BRANCH_EQ" => Branch::Eq,
        "BRANCH_NEQ" => Branch::Neq,
        "BRANCH_MEMBER" => Branch::Member,
        _ => return None,
    })
}

/// The trees of a version 1–3 `TreeEnsembleRegressor` (`votes` = "target") or `TreeEnsembleClassifier` ("class").
fn trees_v3(ex: &Ex<'_, '_>, votes: &str, targets: usize, aggregate: Aggregate) -> Result<Trees, E> {
    let tree_ids = ints_attr(ex, "nodes_treeids")?;
    let node_ids = ints_attr(ex, "nodes_nodeids")?;
    let features = ints_attr(ex, "nodes_featureids")?;
    let modes = ex.attrs().strings("nodes_modes").map_err(|e| ex.attr_err(e))?.unwrap_or_default();
    let values = floats_attr(ex, "nodes_values")?;
    let yes = ints_attr(ex, "nodes_truenodeids")?;
    let no = ints_attr(ex, "nodes_falsenodeids")?;
    let mut missing = ints_attr(ex, "nodes_missing_value_tracks_true")?;
    if missing.is_empty() {
        missing = vec![0; tree_ids.len()];
    }
    let n = same_lengths(
        ex,
        &[
            ("nodes_treeids", tree_ids.len()),
            ("nodes_nodeids", node_ids.len()),
            ("nodes_featureids", features.len()),
            ("nodes_modes", modes.len()),
            ("nodes_values", values.len()),
            ("nodes_truenodeids", yes.len()),
            ("nodes_falsenodeids", no.len()),
            ("nodes_missing_value_tracks_true", missing.len()),
        ],
    )?;
    let v_trees = ints_attr(ex, &format!("{votes}_treeids"))?;
    let v_nodes = ints_attr(ex, &format!("{votes}_nodeids"))?;
    let v_ids = ints_attr(ex, &format!("{votes}_ids"))?;
    let v_weights = floats_attr(ex, &format!("{votes}_weights"))?;
    let (a, b, c, d) =
        (format!("{votes}_treeids"), format!("{votes}_nodeids"), format!("{votes}_ids"), format!("{votes}_weights"));
    same_lengths(ex, &[(&a, v_trees.len()), (&b, v_nodes.len()), (&c, v_ids.len()), (&d, v_weights.len())])?;
    let mut at = std::collections::HashMap::new();
    for i in 0..n {
        if at.insert((tree_ids[i], node_ids[i]), i).is_some() {
            return Err(
                ex.attr_fail("nodes_nodeids", format!("names node {} of tree {} twice", node_ids[i], tree_ids[i]))
            );
        }
    }
    // Interior nodes and leaves get their own indices, in the order they are listed.
    let (mut interior, mut leaf) = (vec![None; n], vec![None; n]);
    let (mut n_interior, mut n_leaves) = (0u32, 0u32);
    for i in 0..n {
        if modes[i] == "LEAF" {
            leaf[i] = Some(n_leaves);
            n_leaves += 1;
        } else {
            interior[i] = Some(n_interior);
            n_interior += 1;
        }
    }
    let child = |i: usize| interior[i].map_or_else(|| Child::Leaf(leaf[i].unwrap_or(0)), Child::Node);
    let find = |tree: i64, id: i64, from: usize| {
        at.get(&(tree, id)).copied().ok_or_else(|| {
            ex.attr_fail(
                "nodes_truenodeids",
                format!("node {} of tree {tree} leads to node {id}, which it does not list", node_ids[from]),
            )
        })
    };
    let mut nodes = Vec::with_capacity(n_interior as usize);
    let mut is_child = vec![false; n];
    for i in 0..n {
        if interior[i].is_none() {
            continue;
        }
        let b = branch(&modes[i]).filter(|b| *b != Branch::Member).ok_or_else(|| {
            ex.attr_fail("nodes_modes", format!("holds '{}', which is not a mode of this version", modes[i]))
        })?;
        let feature = u32::try_from(features[i])
            .map_err(|_| ex.attr_fail("nodes_featureids", format!("holds {}, not a feature index", features[i])))?;
        let (t, f) = (find(tree_ids[i], yes[i], i)?, find(tree_ids[i], no[i], i)?);
        is_child[t] = true;
        is_child[f] = true;
        nodes.push(TreeNode {
            feature,
            branch: b,
            split: values[i],
            members: vec![],
            missing_yes: missing[i] != 0,
            yes: child(t),
            no: child(f),
        });
    }
    let mut leaves = vec![Vec::new(); n_leaves as usize];
    for k in 0..v_trees.len() {
        let i = at.get(&(v_trees[k], v_nodes[k])).copied().filter(|&i| leaf[i].is_some()).ok_or_else(|| {
            ex.attr_fail(
                &b,
                format!("entry {k} votes at node {} of tree {}, which is not a leaf", v_nodes[k], v_trees[k]),
            )
        })?;
        let target = u32::try_from(v_ids[k]).map_err(|_| ex.attr_fail(&c, format!("holds {}", v_ids[k])))?;
        leaves[leaf[i].unwrap_or(0) as usize].push((target, v_weights[k]));
    }
    let roots = (0..n).filter(|&i| !is_child[i]).map(child).collect();
    let rooted: std::collections::HashSet<i64> = (0..n).filter(|&i| !is_child[i]).map(|i| tree_ids[i]).collect();
    if let Some(t) = tree_ids.iter().find(|t| !rooted.contains(t)) {
        return Err(ex.fail(format!("its trees: tree {t} has no root (each of its nodes is another's child: a cycle)")));
    }
    let trees = Trees { targets, aggregate, roots, nodes, leaves };
    trees.check().map_err(|m| ex.fail(format!("its trees: {m}")))?;
    Ok(trees)
}

fn aggregate_of(ex: &Ex<'_, '_>, name: &str) -> Result<Aggregate, E> {
    Ok(match string_attr(ex, "aggregate_function", "SUM")?.as_str() {
        "SUM" => Aggregate::Sum,
        "AVERAGE" => Aggregate::Average,
        "MIN" => Aggregate::Min,
        "MAX" => Aggregate::Max,
        other => return Err(ex.attr_fail(name, format!("is '{other}': SUM, AVERAGE, MIN or MAX"))),
    })
}

/// `TreeEnsembleRegressor` and `TreeEnsembleClassifier` (versions 1–3).
fn tree_v3(ex: &mut Ex<'_, '_>, x: &str) -> Result<Vec<Option<String>>, E> {
    let xf = floats(ex, x)?;
    let post = string_attr(ex, "post_transform", "NONE")?;
    let base = floats_attr(ex, "base_values")?;
    let classifier = ex.node.op_type() == "TreeEnsembleClassifier";
    let (trees, labels) = if classifier {
        let labels = class_labels(ex, "classlabels_int64s", "classlabels_strings")?;
        (trees_v3(ex, "class", labels.len(), Aggregate::Sum)?, labels)
    } else {
        let targets = ex.attrs().count_or("n_targets", 1).map_err(|e| ex.attr_err(e))?;
        (trees_v3(ex, "target", targets, aggregate_of(ex, "aggregate_function")?)?, Labels::Ints(Vec::new()))
    };
    let targets = trees.targets;
    let ids: std::collections::BTreeSet<u32> = trees.leaves.iter().flatten().map(|(t, _)| *t).collect();
    let positive = trees.leaves.iter().flatten().all(|(_, w)| *w >= 0.0);
    // A binary classifier with one column of scores (rule 3) may have one base value, for that column.
    let binary = classifier && ids.len() == 1 && targets == 2;
    if !base.is_empty() && base.len() != targets && !(binary && base.len() == 1) {
        return Err(ex.attr_fail("base_values", format!("has {} values, but there are {targets} targets", base.len())));
    }
    let dt = ex.ty(&xf)?.dt;
    let mut s = ex.ir_op(Op::TreeEnsemble(Box::new(trees)), &[&xf])?;
    if binary {
        let c = i64::from(*ids.iter().next().unwrap_or(&0));
        let (from, to, axis) = (ex.ints(&[c])?, ex.ints(&[c + 1])?, ex.ints(&[1])?);
        s = ex.op("Slice", &[&s, &from, &to, &axis], vec![])?;
        if let Some(&b) = base.get(if base.len() == 1 { 0 } else { c as usize }) {
            let b = constant(ex, dt, &[1], &[b])?;
            s = ex.op("Add", &[&s, &b], vec![])?;
        }
        // Rule 3: with weights of both signs the scores are `[−s, s]` and the boundary 0, else `[1 − s, s]` and 0.5.
        return if positive {
            binary_classes(ex, &s, &labels, &post, false, 0.5)
        } else {
            binary_classes(ex, &s, &labels, &post, true, 0.0)
        };
    } else if !base.is_empty() {
        let b = constant(ex, dt, &[targets], &base)?;
        s = ex.op("Add", &[&s, &b], vec![])?;
    }
    if !classifier {
        let y = post_transform(ex, &s, &post)?;
        return Ok(vec![Some(cast(ex, &y, DatumType::F32)?)]);
    }
    classify(ex, &s, &labels, &post)
}

/// The trees of a version 5 `TreeEnsemble`.
fn trees_v5(ex: &Ex<'_, '_>) -> Result<Trees, E> {
    let tensor = |name: &str| -> Result<Vec<f64>, E> {
        match ex.attrs().tensor(name).map_err(|e| ex.attr_err(e))? {
            Some(t) => crate::consts::to_f64s(&t).map_err(|e| ex.fail(e.to_string())),
            None => Ok(Vec::new()),
        }
    };
    let splits = tensor("nodes_splits")?;
    let modes = tensor("nodes_modes")?;
    let weights = tensor("leaf_weights")?;
    let members = tensor("membership_values")?;
    let features = ints_attr(ex, "nodes_featureids")?;
    let (yes, no) = (ints_attr(ex, "nodes_truenodeids")?, ints_attr(ex, "nodes_falsenodeids")?);
    let (yes_leaf, no_leaf) = (ints_attr(ex, "nodes_trueleafs")?, ints_attr(ex, "nodes_falseleafs")?);
    let mut missing = ints_attr(ex, "nodes_missing_value_tracks_true")?;
    if missing.is_empty() {
        missing = vec![0; features.len()];
    }
    let n = same_lengths(
        ex,
        &[
            ("nodes_featureids", features.len()),
            ("nodes_splits", splits.len()),
            ("nodes_modes", modes.len()),
            ("nodes_truenodeids", yes.len()),
            ("nodes_falsenodeids", no.len()),
            ("nodes_trueleafs", yes_leaf.len()),
            ("nodes_falseleafs", no_leaf.len()),
            ("nodes_missing_value_tracks_true", missing.len()),
        ],
    )?;
    let targets_of = ints_attr(ex, "leaf_targetids")?;
    same_lengths(ex, &[("leaf_targetids", targets_of.len()), ("leaf_weights", weights.len())])?;
    let index = |v: i64, what: &str| u32::try_from(v).map_err(|_| ex.attr_fail(what, format!("holds {v}")));
    let child = |i: usize, leafs: &[i64], ids: &[i64], what: &str| -> Result<Child, E> {
        let k = index(ids[i], what)?;
        Ok(if leafs[i] != 0 { Child::Leaf(k) } else { Child::Node(k) })
    };
    let mut sets = members.split(|v| v.is_nan()).map(|s| s.to_vec());
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let b = match modes[i] as i64 {
            0 => Branch::Leq,
            1 => Branch::Lt,
            2 => Branch::Gte,
            3 => Branch::Gt,
            4 => Branch::Eq,
            5 => Branch::Neq,
            6 => Branch::Member,
            other => return Err(ex.attr_fail("nodes_modes", format!("holds {other}: modes are 0 to 6"))),
        };
        let set = if b == Branch::Member {
            sets.next().ok_or_else(|| ex.attr_fail("membership_values", "has fewer sets than BRANCH_MEMBER nodes"))?
        } else {
            Vec::new()
        };
        nodes.push(TreeNode {
            feature: index(features[i], "nodes_featureids")?,
            branch: b,
            split: splits[i],
            members: set,
            missing_yes: missing[i] != 0,
            yes: child(i, &yes_leaf, &yes, "nodes_truenodeids")?,
            no: child(i, &no_leaf, &no, "nodes_falsenodeids")?,
        });
    }
    let leaves = targets_of
        .iter()
        .zip(&weights)
        .map(|(&t, &w)| Ok(vec![(index(t, "leaf_targetids")?, w)]))
        .collect::<Result<Vec<_>, E>>()?;
    let roots = ints_attr(ex, "tree_roots")?
        .into_iter()
        .map(|r| index(r, "tree_roots").map(Child::Node))
        .collect::<Result<Vec<_>, E>>()?;
    let aggregate = match ex.attrs().int_or("aggregate_function", 1).map_err(|e| ex.attr_err(e))? {
        0 => Aggregate::Average,
        1 => Aggregate::Sum,
        2 => Aggregate::Min,
        3 => Aggregate::Max,
        other => return Err(ex.attr_fail("aggregate_function", format!("is {other}: it must be 0 to 3"))),
    };
    let targets = ex.attrs().count_or("n_targets", 1).map_err(|e| ex.attr_err(e))?;
    let trees = Trees { targets, aggregate, roots, nodes, leaves };
    trees.check().map_err(|m| ex.fail(format!("its trees: {m}")))?;
    Ok(trees)
}
