//! Arithmetic precision per target (`--precision`): what a plan asks of each target, and what the target grants.
//!
//! Rules, each with the code that keeps it and its test (`compiler/tests/precision.rs`):
//! 1. The default is fp32 on every target, and fp32 is granted by every backend as it is
//!    ([`Backend::precision`]'s default; `fp32_is_the_default`).
//! 2. A precision is asked for every target (`--precision tf32`) or for one (`--precision opencl=tf32`, the
//!    target named as in `--target` or by its memory space); the last word for a target wins
//!    ([`resolve`]; `per_target_beats_the_whole_plan`). A name that is none of the targets is an error naming
//!    the option and the targets (`unknown_target_is_refused`).
//! 3. A target grants what it asks, or a documented fallback with its reason (the CPU computes tf32 as fp32: no
//!    TF32 arithmetic), or refuses naming the target and what it lacks: never a silent change of precision. The
//!    plan keeps both words per target ([`Granted`]) and shows them in its text and JSON, and runs report them
//!    (`fallback_is_shown`, `refusal_names_the_target`).
//! 4. Built code stores what was asked and asks the targets it opens again ([`super::serial`]), so a built
//!    executable on another device gets that device's answer, never a precision its device cannot do
//!    (`a_written_plan_asks_its_targets_again`).
//! 5. fp16 and bf16 are how the plan's values are stored, so they are asked of the whole plan: when every target
//!    computes in one of them, the graph's f32 values are stored in it before planning
//!    ([`crate::passes::storage`], run by the driver), and when the targets disagree (an fp16 target beside an
//!    fp32 one), the plan is refused naming both ([`storage`]; `storage_is_asked_of_every_target`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{Backend, PlanError};

/// The arithmetic a target's kernels do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Precision {
    /// IEEE single precision throughout (the default).
    #[default]
    Fp32,
    /// Products (convolutions, MatMul, Gemm) take their operands rounded to TF32 (10 bits of mantissa) and sum in
    /// fp32, as NVIDIA's tensor cores do; values are stored in fp32.
    Tf32,
    /// Values stored in IEEE half precision, products summed in fp32.
    Fp16,
    /// Values stored in bfloat16, products summed in fp32.
    Bf16,
}

impl Precision {
    /// Every precision, in the order the option lists them.
    pub const ALL: [Precision; 4] = [Precision::Fp32, Precision::Tf32, Precision::Fp16, Precision::Bf16];

    /// The option's word for it.
    pub fn word(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

impl FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Precision, String> {
        Precision::ALL.into_iter().find(|p| p.word() == s).ok_or_else(|| {
            let words: Vec<&str> = Precision::ALL.iter().map(|p| p.word()).collect();
            format!("'{s}' is no precision (one of {})", words.join(", "))
        })
    }
}

/// What a target does with the precision asked of it (rule 3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Granted {
    /// The precision the plan asked of the target.
    pub asked: Precision,
    /// The precision its kernels compute in.
    pub computed: Precision,
    /// How, in a few words: the units used, or why the fallback (`"no TF32 arithmetic: products in fp32"`).
    pub how: String,
}

impl Granted {
    /// The precision asked, done as asked, `how` in a few words.
    pub fn as_asked(asked: Precision, how: impl Into<String>) -> Granted {
        Granted { asked, computed: asked, how: how.into() }
    }

    /// One phrase for the plan's text and the report: `tf32 (tensor cores)`, `tf32 asked, fp32 computed (…)`.
    pub fn describe(&self) -> String {
        if self.asked == self.computed {
            format!("{} ({})", self.computed, self.how)
        } else {
            format!("{} asked, {} computed ({})", self.asked, self.computed, self.how)
        }
    }
}

/// The precision asked of each target (rule 2): `whole` for every target, then `per_target` (`(name, precision)`,
/// a target's name or memory space), the last word for a target winning.
pub fn resolve(
    targets: &[&dyn Backend],
    whole: Option<Precision>,
    per_target: &[(String, Precision)],
) -> Result<Vec<Precision>, PlanError> {
    let mut asked = vec![whole.unwrap_or_default(); targets.len()];
    for (name, p) in per_target {
        let at = targets.iter().position(|t| t.spec().name == *name || t.spec().space == *name).ok_or_else(|| {
            let names: Vec<&str> = targets.iter().map(|t| t.spec().name.as_str()).collect();
            PlanError::BadOption {
                option: format!("--precision {name}={p}"),
                message: format!("'{name}' is none of the targets ({})", names.join(", ")),
            }
        })?;
        asked[at] = *p;
    }
    Ok(asked)
}

/// What each target grants of `asked` (rule 3), or the first refusal, naming the target.
pub fn grant(targets: &[&dyn Backend], asked: &[Precision]) -> Result<Vec<Granted>, PlanError> {
    targets
        .iter()
        .zip(asked)
        .map(|(t, &p)| {
            t.precision(p).map_err(|why| PlanError::BadOption {
                option: format!("--precision {}={p}", t.spec().name),
                message: format!("target {} cannot compute in {p}: {why}", t.spec().name),
            })
        })
        .collect()
}

/// The type the plan's float values are stored in (rule 5): f16 or bf16 when every target computes in fp16 or
/// bf16 alike, `None` when none does (fp32 and tf32 store f32), an error naming two targets that disagree.
pub fn storage(targets: &[&dyn Backend], granted: &[Granted]) -> Result<Option<stowage_runtime::DatumType>, PlanError> {
    use stowage_runtime::DatumType;
    let dt = |p: Precision| match p {
        Precision::Fp16 => DatumType::F16,
        Precision::Bf16 => DatumType::BF16,
        Precision::Fp32 | Precision::Tf32 => DatumType::F32,
    };
    let Some(first) = granted.first() else { return Ok(None) };
    if let Some(i) = granted.iter().position(|g| dt(g.computed) != dt(first.computed)) {
        let name = |k: usize| targets.get(k).map_or("?", |t| t.spec().name.as_str());
        // The target asked for a half type, and the one that disagrees with it.
        let (h, o) = if dt(first.computed) == DatumType::F32 { (i, 0) } else { (0, i) };
        let half = granted[h].computed;
        let advice = match targets.get(o).map(|t| t.precision(half)) {
            Some(Err(why)) => format!("{} cannot store {half} ({why}): leave it out of --target", name(o)),
            _ => format!("ask it of every target: --precision {half}"),
        };
        return Err(PlanError::BadOption {
            option: format!("--precision {}={}", name(h), granted[h].asked),
            message: format!(
                "fp16 and bf16 store the plan's values, so every target must compute in the same one: {} computes \
                 in {half}, {} in {} ({advice})",
                name(h),
                name(o),
                granted[o].computed,
            ),
        });
    }
    Ok(Some(dt(first.computed)).filter(|&d| d != DatumType::F32))
}
