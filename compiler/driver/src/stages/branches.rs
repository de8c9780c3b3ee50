//! A cut at an `If` (`stages.rs` rules 6 and 7): which branch each run took, and both branches compiled, each
//! with the copies its plan makes.
//!
//! Rule 7 in full: the first run that reaches the cut compiles the node part for the branch it takes (as every
//! part is compiled, rule 2) and then for the other one too, for the same inputs with the condition flipped, and
//! keeps both versions; a later run taking the other branch with inputs of the same key runs it with no compile
//! (inputs of another key compile the branch they take when they take it, as any part). The compile of the
//! branch not taken is part of that first run's time. The cut's line gives the copies each branch's plan lists
//! (`Plan::run_copies`: every run's, and those made when an output is read) (`the then branch 3 times, 2 copies planned; the
//! else branch never, no copy planned`). The branch not taken may not compile for these inputs (its shapes need
//! what only its own run gives, or it is wrong for them, as a guard's branch is): that never fails the run, and
//! the line says `not compiled for these inputs` with the reason, until a run takes it. Test:
//! `tests/tests/run_time_shapes.rs` (`each_model_is_compiled_in_stages…`, `an_if_cut_plans_both_branches…`).

use std::path::Path;
use std::sync::Mutex;

use stowage_runtime::{DatumType, Tensor};

use super::{Cut, Later, Stage};
use crate::crossing::Forms;
use crate::error::{DriverError, Result};
use crate::options::RunOptions;

/// What a cut at an `If` knows of its branches.
#[derive(Default)]
pub(super) struct Branches {
    /// How many runs took the then branch and the else branch.
    taken: Mutex<[u64; 2]>,
    /// Per branch, then first: the copies its last compiled version plans per run, or why it did not compile.
    planned: Mutex<[Option<std::result::Result<usize, String>>; 2]>,
}

impl Cut {
    /// For a cut at an `If`: whether this run takes its then branch, from its condition among `values` (rule 6).
    pub(super) fn branch(&self, values: &[(String, Tensor<'static>)]) -> Option<bool> {
        let (_, t) = self.condition(values)?;
        let bytes = t.to_row_major().ok()?.as_bytes().ok()?.to_vec();
        Some(bytes.first().is_some_and(|&b| b != 0))
    }

    /// The condition's name and its tensor among `values`, for a cut at an `If`.
    fn condition<'v>(&self, values: &'v [(String, Tensor<'static>)]) -> Option<(&'v String, &'v Tensor<'static>)> {
        if self.node.1 != "If" {
            return None;
        }
        let node = self.later.first()?.part.model.graph.as_ref()?.node.first()?;
        let cond = node.input.first()?;
        values.iter().rev().find(|(n, _)| n == cond).map(|(n, t)| (n, t))
    }

    /// Counts a run that takes the then branch (`then`) or the else branch (rule 6).
    pub(super) fn count(&self, then: bool) {
        self.branches.taken.lock().unwrap_or_else(|p| p.into_inner())[usize::from(!then)] += 1;
    }

    /// After the node part ran for branch `then` on `values` (rule 7): records its planned copies, and compiles
    /// the other branch for the same inputs unless it was tried before.
    pub(super) fn plan_both(
        &self,
        then: bool,
        values: &[(String, Tensor<'static>)],
        forms: &Forms,
        model: &Path,
        options: &RunOptions,
    ) {
        let Some(node) = self.later.first() else { return };
        let ran = node.last_stage().map(|s| copies(&s));
        let mut planned = self.branches.planned.lock().unwrap_or_else(|p| p.into_inner());
        planned[usize::from(!then)] = ran.map(Ok);
        if planned[usize::from(then)].is_some() {
            return;
        }
        let other = self.flipped(values).and_then(|v| node.prepare(&v, forms, model, options, &self.node));
        planned[usize::from(then)] = Some(other.map(|s| copies(&s)).map_err(|e| e.to_string()));
    }

    /// `values` with the condition flipped.
    fn flipped(&self, values: &[(String, Tensor<'static>)]) -> Result<Vec<(String, Tensor<'static>)>> {
        let (name, t) = self.condition(values).ok_or_else(|| DriverError::Input("the If's condition".into()))?;
        let cond = t.to_vec::<bool>().map_err(|e| DriverError::Input(format!("value '{name}': {e}")))?;
        let flipped: Vec<bool> = cond.iter().map(|c| !c).collect();
        let t = Tensor::from_vec(t.shape(), flipped).map_err(|e| DriverError::Input(format!("value '{name}': {e}")))?;
        debug_assert_eq!(t.dt(), DatumType::Bool);
        let mut values = values.to_vec();
        values.push((name.clone(), t));
        Ok(values)
    }

    /// The words the cut's line ends with (rules 6 and 7): `; the then branch 3 times, 2 copies planned; the else
    /// branch never, no copy planned`.
    pub(super) fn branch_words(&self) -> String {
        let [then, otherwise] = *self.branches.taken.lock().unwrap_or_else(|p| p.into_inner());
        let planned = self.branches.planned.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let plans = |k: usize| match &planned[k] {
            None => String::new(),
            Some(Ok(0)) => ", no copy planned".into(),
            Some(Ok(1)) => ", 1 copy planned".into(),
            Some(Ok(n)) => format!(", {n} copies planned"),
            Some(Err(e)) => format!(", not compiled for these inputs ({e})"),
        };
        format!("; {}{}; {}{}", times("then", then), plans(0), times("else", otherwise), plans(1))
    }
}

impl Later {
    /// The part compiled for the inputs `values` gives it, kept as a version if it was not (rule 7), without
    /// making it the last used.
    fn prepare(
        &self,
        values: &[(String, Tensor<'static>)],
        forms: &Forms,
        model: &Path,
        options: &RunOptions,
        node: &(String, String),
    ) -> Result<std::rc::Rc<Stage>> {
        let keyed = self.keyed(values, forms, options)?;
        let compile = || self.compile(&keyed.args, &keyed.typed, model, &keyed.options, node, keyed.fix_outer);
        match self.versions.ensure(keyed.key, compile) {
            // Rule 2, as a run does: the subgraphs' shapes hang on what they read from around the node.
            Err(DriverError::AtRunTime { .. }) if !keyed.fix_outer && !self.outer.is_empty() => {
                *self.fix_outer.lock().unwrap_or_else(|p| p.into_inner()) = true;
                self.prepare(values, forms, model, options, node)
            }
            stage => stage,
        }
    }
}

/// The copies `stage`'s plans make per run.
fn copies(stage: &Stage) -> usize {
    let mut n = 0;
    stage.each_session(&mut |s| n += s.plan.run_copies().count());
    n
}

/// How many runs took a branch, in words: `the then branch 3 times`.
fn times(branch: &str, n: u64) -> String {
    let n = match n {
        0 => "never".to_string(),
        1 => "once".to_string(),
        n => format!("{n} times"),
    };
    format!("the {branch} branch {n}")
}

/// How many runs took an `If`'s then branch and its else branch, in words: `the then branch 3 times, the else
/// branch never` (rule 6; the report's `branches` lines too).
pub(crate) fn taken(then: u64, otherwise: u64) -> String {
    format!("{}, {}", times("then", then), times("else", otherwise))
}
