//! `--precision` in the planner (`plan/precision.rs`, its rules): what is asked of each target, what each grants,
//! how the plan shows it and keeps it when written out for built code.

use stowage_compiler::ir::{Graph, NodeId, Op, Unary, ValueType};
use stowage_compiler::plan::{self, Accepts, Backend, Granted, PlanOptions, Precision, TargetSpec};
use stowage_runtime::{DatumType, MemoryKind, StorageDescriptor};

/// A made-up target: `tensor_cores` grants tf32 as asked, else tf32 falls back to fp32; fp16 and bf16 refused
/// (granted by [`Half`]).
struct Fake {
    spec: TargetSpec,
    tensor_cores: bool,
}

fn target(name: &str, space: &str, kind: MemoryKind, tensor_cores: bool) -> Fake {
    let memory = StorageDescriptor { kind, ..StorageDescriptor::HOST };
    Fake {
        spec: TargetSpec { name: name.into(), space: space.into(), memory, gflops: 100.0, launch_us: 1.0 },
        tensor_cores,
    }
}

impl Backend for Fake {
    fn spec(&self) -> &TargetSpec {
        &self.spec
    }
    fn supports(&self, _: &Graph, _: NodeId) -> Result<(), String> {
        Ok(())
    }
    fn accepts(&self, _: &Graph, _: NodeId, _: usize) -> Accepts {
        Accepts::PACKED
    }
    fn precision(&self, asked: Precision) -> Result<Granted, String> {
        match asked {
            Precision::Fp32 => Ok(Granted::as_asked(asked, "fp32 arithmetic")),
            Precision::Tf32 if self.tensor_cores => Ok(Granted::as_asked(asked, "tensor cores")),
            Precision::Tf32 => Ok(Granted { asked, computed: Precision::Fp32, how: "no tensor cores".into() }),
            _ => Err("no half-precision kernels".into()),
        }
    }
}

/// A made-up target that stores values in fp16 or bf16 when asked, as the OpenCL backend does.
struct Half(TargetSpec);

impl Backend for Half {
    fn spec(&self) -> &TargetSpec {
        &self.0
    }
    fn supports(&self, _: &Graph, _: NodeId) -> Result<(), String> {
        Ok(())
    }
    fn accepts(&self, _: &Graph, _: NodeId, _: usize) -> Accepts {
        Accepts::PACKED
    }
    fn precision(&self, asked: Precision) -> Result<Granted, String> {
        Ok(Granted::as_asked(asked, "stored as asked"))
    }
}

/// A plain backend that keeps `Backend::precision`'s default.
struct Plain(TargetSpec);

impl Backend for Plain {
    fn spec(&self) -> &TargetSpec {
        &self.0
    }
    fn supports(&self, _: &Graph, _: NodeId) -> Result<(), String> {
        Ok(())
    }
    fn accepts(&self, _: &Graph, _: NodeId, _: usize) -> Accepts {
        Accepts::PACKED
    }
}

fn graph() -> Graph {
    let mut g = Graph::new("one relu");
    let ty = ValueType::new(DatumType::F32, [1, 8]);
    let x = g.add_input("x", ty.clone());
    let n = g.add_node("r", Op::Unary(Unary::Relu), vec![Some(x)], vec![Some(("y".into(), ty))]);
    let y = g.node(n).outputs[0].expect("output");
    g.add_output("y", y);
    g
}

fn gpu() -> Fake {
    target("gpu", "gpu:0", MemoryKind::Device, true)
}

fn cpu() -> Fake {
    target("cpu", "host", MemoryKind::Host, false)
}

fn computed(p: &plan::Plan) -> Vec<(Precision, Precision)> {
    p.precisions.iter().map(|g| (g.asked, g.computed)).collect()
}

#[test]
fn fp32_is_the_default() {
    let (g, gpu, cpu) = (graph(), gpu(), cpu());
    let p = plan::plan(&g, &[&gpu, &cpu], &PlanOptions::default()).expect("plans");
    assert_eq!(computed(&p), vec![(Precision::Fp32, Precision::Fp32); 2]);
    // Nothing is said of the default: a plan without --precision prints as it did.
    assert!(!plan::show::text(&p).contains("precision"), "{}", plan::show::text(&p));
    // A backend that says nothing of precision grants fp32 and refuses the others, naming the target.
    let plain = Plain(cpu.spec.clone());
    assert!(plan::plan(&g, &[&plain], &PlanOptions::default()).is_ok());
    let err = plan::plan(&g, &[&plain], &PlanOptions::default().precision(Precision::Tf32)).expect_err("refused");
    assert_eq!(
        err.to_string(),
        "--precision cpu=tf32: target cpu cannot compute in tf32: this backend computes fp32 only (its kind has no \
         tf32 kernels)"
    );
}

#[test]
fn per_target_beats_the_whole_plan() {
    let (g, gpu, cpu) = (graph(), gpu(), cpu());
    // The whole plan at tf32, then the CPU back at fp32 by name and the GPU at tf32 by its memory space.
    let options = PlanOptions::default()
        .precision(Precision::Tf32)
        .target_precision("cpu", Precision::Fp32)
        .target_precision("gpu:0", Precision::Tf32);
    let p = plan::plan(&g, &[&gpu, &cpu], &options).expect("plans");
    assert_eq!(computed(&p), vec![(Precision::Tf32, Precision::Tf32), (Precision::Fp32, Precision::Fp32)]);
    // The last word for a target wins.
    let options = options.target_precision("gpu", Precision::Fp32);
    let p = plan::plan(&g, &[&gpu, &cpu], &options).expect("plans");
    assert_eq!(computed(&p)[0], (Precision::Fp32, Precision::Fp32));
}

#[test]
fn unknown_target_is_refused() {
    let (g, gpu, cpu) = (graph(), gpu(), cpu());
    let options = PlanOptions::default().target_precision("opencl", Precision::Tf32);
    let err = plan::plan(&g, &[&gpu, &cpu], &options).expect_err("refused");
    assert_eq!(err.to_string(), "--precision opencl=tf32: 'opencl' is none of the targets (gpu, cpu)");
}

#[test]
fn fallback_is_shown() {
    let (g, gpu, cpu) = (graph(), gpu(), cpu());
    let p = plan::plan(&g, &[&gpu, &cpu], &PlanOptions::default().precision(Precision::Tf32)).expect("plans");
    assert_eq!(computed(&p), vec![(Precision::Tf32, Precision::Tf32), (Precision::Tf32, Precision::Fp32)]);
    let text = plan::show::text(&p);
    assert!(text.contains("  gpu: ") && text.contains("    precision: tf32 (tensor cores)\n"), "{text}");
    assert!(text.contains("    precision: tf32 asked, fp32 computed (no tensor cores)\n"), "{text}");
}

#[test]
fn refusal_names_the_target() {
    let (g, gpu, cpu) = (graph(), gpu(), cpu());
    let options = PlanOptions::default().target_precision("gpu", Precision::Fp16);
    let err = plan::plan(&g, &[&gpu, &cpu], &options).expect_err("refused");
    assert_eq!(err.to_string(), "--precision gpu=fp16: target gpu cannot compute in fp16: no half-precision kernels");
}

#[test]
fn a_written_plan_asks_its_targets_again() {
    let (g, gpu, cpu) = (graph(), gpu(), cpu());
    let p = plan::plan(&g, &[&gpu, &cpu], &PlanOptions::default().precision(Precision::Tf32)).expect("plans");
    let bytes = plan::serial::encode(&p);
    let back = plan::serial::decode(&bytes, &g, &[&gpu, &cpu]).expect("reads back");
    assert_eq!(back.precisions, p.precisions);
    // The same plan read where the first target has no tensor cores: that target's own answer, shown.
    let other = target("gpu", "gpu:0", MemoryKind::Device, false);
    let back = plan::serial::decode(&bytes, &g, &[&other, &cpu]).expect("reads back");
    assert_eq!(computed(&back)[0], (Precision::Tf32, Precision::Fp32));
    // And where it cannot do what was asked at all, the plan is refused, naming the target.
    let plain = Plain(gpu.spec.clone());
    let err = plan::serial::decode(&bytes, &g, &[&plain, &cpu]).expect_err("refused");
    assert!(err.to_string().contains("target gpu cannot compute in tf32"), "{err}");
}

#[test]
fn words_read_and_print_alike() {
    for p in Precision::ALL {
        assert_eq!(p.word().parse::<Precision>(), Ok(p));
        assert_eq!(p.to_string(), p.word());
    }
    assert_eq!("fp64".parse::<Precision>(), Err("'fp64' is no precision (one of fp32, tf32, fp16, bf16)".into()));
}

/// Rule 5: fp16 and bf16 are the plan's storage, asked of every target alike.
#[test]
fn storage_is_asked_of_every_target() {
    let (cpu, a, b) = (cpu(), Half(gpu().spec.clone()), Half(target("gpu2", "gpu:1", MemoryKind::Device, false).spec));
    let storage = |targets: &[&dyn Backend], whole: Option<Precision>, per: &[(String, Precision)]| {
        let asked = plan::precision::resolve(targets, whole, per).expect("resolves");
        let granted = plan::precision::grant(targets, &asked).expect("granted");
        plan::precision::storage(targets, &granted)
    };
    assert_eq!(storage(&[&a, &b], Some(Precision::Fp16), &[]).expect("one storage"), Some(DatumType::F16));
    assert_eq!(storage(&[&a], Some(Precision::Bf16), &[]).expect("one storage"), Some(DatumType::BF16));
    assert_eq!(storage(&[&a, &cpu], Some(Precision::Tf32), &[]).expect("f32 storage"), None);
    let err = storage(&[&a, &b], Some(Precision::Fp16), &[("gpu2".into(), Precision::Bf16)]).expect_err("disagree");
    assert!(err.to_string().starts_with("--precision gpu=fp16: fp16 and bf16 store the plan's values"), "{err}");
    assert!(
        err.to_string().ends_with("gpu computes in fp16, gpu2 in bf16 (ask it of every target: --precision fp16)"),
        "{err}"
    );
    // A target that cannot store the type is named, with what it lacks.
    let err = storage(&[&cpu, &a], None, &[("gpu".into(), Precision::Fp16)]).expect_err("disagree");
    assert_eq!(
        err.to_string(),
        "--precision gpu=fp16: fp16 and bf16 store the plan's values, so every target must compute in the same one: \
         gpu computes in fp16, cpu in fp32 (cpu cannot store fp16 (no half-precision kernels): leave it out of --target)"
    );
}
