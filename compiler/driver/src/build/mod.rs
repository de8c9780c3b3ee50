//! `stowage build MODEL -o EXE`: plans the model as a run would, compiles the CPU segments' generated kernels
//! into an object file with cranelift-object, writes a small crate around them (`source.rs` writes its
//! `main.rs`) and builds it with cargo against stowage's own crates.
//!
//! Every model's crate builds into one shared target directory (`STOWAGE_BUILD_DIR`, by default
//! `target/stowage-build` in stowage's source tree), so stowage's crates are compiled once, by the first build,
//! and later builds compile only the model's `main.rs` and link. Files of a model's crate are rewritten only when
//! their contents change. The executable is copied to the output path under a temporary name and renamed into
//! place once complete: a failed build leaves nothing there.

mod api;
mod module;
mod names;
mod source;
mod staged;

use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;
use stowage_compiler::{onnx, plan};

use crate::pipeline::{self as session, RunOptions};
use crate::Progress;

pub use api::{Build, BuildError, GeneratedModule};
pub use module::module_rs;
pub use source::{main_rs, Source};
pub use stowage_compiler::plan::Precision;

/// What a build made.
#[derive(Debug)]
pub struct Built {
    /// The crate written for the model.
    pub crate_dir: PathBuf,
    /// The executable installed.
    pub executable: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// CPU kernels linked in.
    pub kernels: usize,
    /// Copies per run the plan makes (for a model compiled in stages, its first part's plan).
    pub copies_per_run: usize,
    /// One line per cut of a model compiled in stages, the first to run first; empty for any other.
    pub staged: Vec<String>,
}

/// Where stowage's sources are: `STOWAGE_SOURCE`, else the tree this stowage was built from.
fn source_root() -> Result<PathBuf, String> {
    let root = match std::env::var_os("STOWAGE_SOURCE") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
    };
    let driver = root.join("compiler/driver/Cargo.toml");
    if !driver.exists() {
        return Err(format!(
            "stowage's sources are not at {} (a built executable links stowage's crates): set STOWAGE_SOURCE",
            root.display()
        ));
    }
    root.canonicalize().map_err(|e| format!("{}: {e}", root.display()))
}

/// The shared build directory: `STOWAGE_BUILD_DIR`, else `target/stowage-build` in stowage's source tree.
fn build_root(source: &Path) -> PathBuf {
    match std::env::var_os("STOWAGE_BUILD_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => source.join("target/stowage-build"),
    }
}

/// FNV-1a, for stable names.
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

/// Writes `bytes` to `path` unless it already holds them (so cargo sees no change).
pub(crate) fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    std::fs::write(path, bytes).map_err(|e| format!("{}: cannot write it: {e}", path.display()))
}

/// Checks `-o`'s path before any work: a file name in an existing folder, not a folder.
fn check_output(output: &Path) -> Result<(), String> {
    if output.is_dir() {
        return Err(format!("-o {}: is a directory", output.display()));
    }
    let parent = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(format!("-o {}: the folder {} does not exist", output.display(), parent.display()));
    }
    if output.file_name().is_none() {
        return Err(format!("-o {}: not a file name", output.display()));
    }
    Ok(())
}

/// The files of a model's crate, before they are written.
pub struct Generated {
    /// The model's file name.
    pub model_name: String,
    /// `graph.bin`: the optimised graph's structure.
    pub graph: Vec<u8>,
    /// `constants.bin`: its constants.
    pub constants: Vec<u8>,
    /// `plan.bin`: the plan, written out.
    pub plan: Vec<u8>,
    /// `other_plan.bin`: the other path's plan, where there is one.
    pub other_plan: Option<Vec<u8>>,
    /// `src/main.rs`.
    pub main_rs: String,
    /// `kernels.o`, when a target compiles kernels ahead of time.
    pub object: Option<Vec<u8>>,
    /// `--input-value` files: name and TensorProto bytes.
    pub values: Vec<(String, Vec<u8>)>,
    /// Kernels in the object.
    pub kernels: usize,
    /// Copies per run the plan makes.
    pub copies_per_run: usize,
    /// The backends' crates it depends on.
    pub kinds: Vec<crate::KindSource>,
    /// `staged.onnx`, for a model compiled in stages: what its later parts are cut from.
    pub staged: Option<Vec<u8>>,
    /// One line per cut of a model compiled in stages, the first to run first.
    pub staged_lines: Vec<String>,
}

/// A model planned, its kernels compiled: what both the executable and the typed module are written from.
pub(crate) struct Compiled {
    pub model_name: String,
    pub options: RunOptions,
    pub prepared: session::Prepared,
    pub object: Option<Vec<u8>>,
    /// Node, key, symbol.
    pub kernels: Vec<(String, u64, String)>,
    /// The object's Rust items ([`crate::ObjectCode::items`]).
    pub items: Option<String>,
    /// Input name, file name, TensorProto bytes of each `--input-value`.
    pub values: Vec<(String, String, Vec<u8>)>,
    /// The plan, written out.
    pub plan_bytes: Vec<u8>,
    /// For an OpenCL target on a unified device: the staging plan's path, copies and the plan written out
    /// (planned for the target forced discrete), which a discrete device takes at start-up.
    pub other: Option<(String, Vec<String>, Vec<u8>)>,
    /// The optimised graph written out: structure and constants.
    pub encoded: stowage_compiler::ir::serial::Encoded,
    /// The model's declared inputs (those fixed by `--input-value` included).
    pub inputs: Vec<String>,
    /// For a model compiled in stages: the cuts and the model the later parts are cut from (`staged.rs`).
    pub(crate) staged: Option<staged::Staged>,
}

impl Compiled {
    /// What the generated source says.
    pub fn source<'a>(&'a self, in_out_dir: bool, values: &'a [(String, String)]) -> Source<'a> {
        Source {
            model_name: &self.model_name,
            options: &self.options,
            values,
            plan: &self.prepared.plan,
            kernels: &self.kernels,
            items: self.items.as_deref(),
            kinds: &self.prepared.kinds,
            in_out_dir,
            path: &self.prepared.path,
            other: self.other.as_ref().map(|(p, c, _)| (p.as_str(), c.as_slice())),
            inputs: &self.inputs,
            constants_len: self.encoded.constants.len(),
            constants_hash: fnv(&[&self.encoded.constants]),
            staged: self.staged.as_ref().map(|st| (st.cuts.as_slice(), st.lines())),
        }
    }

    /// `(input, file)` of each `--input-value`.
    pub fn value_files(&self) -> Vec<(String, String)> {
        self.values.iter().map(|(n, f, _)| (n.clone(), f.clone())).collect()
    }
}

/// Plans `model` for `options` and compiles its CPU kernels, exported as `{prefix}{k}`. A model that cannot be
/// planned for the target fails here, with the planner's error.
pub(crate) fn compile(model: &Path, options: &RunOptions, prefix: &str) -> Result<Compiled, String> {
    let bytes = std::fs::read(model).map_err(|e| format!("{}: cannot read the model: {e}", model.display()))?;
    let proto =
        onnx::decode_within(&bytes, options.config.value_limit()).map_err(|e| format!("{}: {e}", model.display()))?;
    if let Some(t) = proto.graph.iter().flat_map(|g| &g.initializer).find(|t| !t.external_data.is_empty()) {
        return Err(format!(
            "{}: initializer '{}' keeps its data in an external file; stowage build embeds the model whole and \
             does not read external data yet",
            model.display(),
            t.name()
        ));
    }
    // The plan is made as for a run that reads its outputs; the built code checks its own plan against it.
    let mut options = RunOptions { read_outputs: true, ..options.clone() };
    // A top-level If whose condition comes at run time is cut at, as a run cuts it (`staged.rs`, rule 1).
    options.config.branch_at_run_time = crate::outcome::branch_at_run_time(&options);
    // A model compiled in stages builds its first part ahead of time and carries the rest (`staged.rs`).
    let (mut prepared, first, staged) = staged::prepare(&bytes, model, &options, prefix)?;
    // Both paths ahead of time: a plan made on a unified device also carries the staging plan a discrete one takes.
    let other = match prepared.alternative.clone() {
        Some(target) => {
            // The staging list renames the targets it reroutes, so each target is asked again by position what
            // the plan asked of it (`--precision opencl=tf32` still reaches `opencl:discrete`), and pins and
            // inputs placed on a renamed target follow it.
            let names = |list: &str| list.split(',').map(|name| name.trim().to_string()).collect::<Vec<_>>();
            let (old, new) = (names(&options.target), names(&target));
            let renamed = |t: &mut String| {
                if let Some(at) = old.iter().position(|o| o == t) {
                    *t = new.get(at).cloned().unwrap_or_else(|| t.clone());
                }
            };
            let mut staged_options = RunOptions { target: target.clone(), ..options.clone() };
            let planning = &mut staged_options.planning;
            planning.precision = None;
            planning.target_precisions =
                new.iter().cloned().zip(prepared.plan.precisions.iter().map(|g| g.asked)).collect();
            planning.pins.iter_mut().for_each(|(_, t)| renamed(t));
            planning.input_devices.iter_mut().for_each(|(_, t)| renamed(t));
            let other = session::prepare_build(&first, model, &staged_options, prefix)?;
            let copies = other.plan.copies.iter().map(|c| c.to_string()).collect();
            Some((other.path, copies, plan::serial::encode(&other.plan)))
        }
        None => None,
    };
    let (object, kernels, items) = match prepared.object.take() {
        Some(code) => (Some(code.bytes), code.kernels, Some(code.items)),
        None => (None, Vec::new(), None),
    };
    let model_name = model.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or("model.onnx".into());
    let mut values = Vec::new();
    for (k, (input, t)) in options.config.input_values.iter().enumerate() {
        let encoded = onnx::tensor::encode(t, input).map_err(|e| format!("--input-value {input}: {e}"))?;
        values.push((input.clone(), format!("value_{k}.pb"), encoded.encode_to_vec()));
    }
    let encoded =
        stowage_compiler::ir::serial::encode(&prepared.cx.graph).map_err(|e| format!("{}: {e}", model.display()))?;
    let inputs = proto
        .graph
        .iter()
        .flat_map(|g| {
            let initializers: Vec<&str> = g.initializer.iter().map(|t| t.name()).collect();
            g.input.iter().map(|i| i.name().to_string()).filter(move |n| !initializers.contains(&n.as_str()))
        })
        .collect();
    let plan_bytes = plan::serial::encode(&prepared.plan);
    drop(first);
    Ok(Compiled {
        model_name,
        options,
        prepared,
        object,
        kernels,
        items,
        values,
        plan_bytes,
        other,
        encoded,
        inputs,
        staged,
    })
}

/// Plans `model` for `options` and generates its executable crate's source and kernel object.
pub fn generate(model: &Path, options: &RunOptions) -> Result<Generated, String> {
    let c = compile(model, options, "stowage_k")?;
    let files = c.value_files();
    let main_rs = main_rs(&c.source(false, &files))?;
    Ok(Generated {
        main_rs,
        kernels: c.kernels.len(),
        copies_per_run: c.prepared.plan.run_copies().count(),
        values: c.values.into_iter().map(|(_, f, b)| (f, b)).collect(),
        model_name: c.model_name,
        graph: c.encoded.graph,
        constants: c.encoded.constants,
        plan: c.plan_bytes,
        other_plan: c.other.map(|(_, _, b)| b),
        object: c.object,
        kinds: c.prepared.kinds,
        staged_lines: c.staged.as_ref().map(|s| s.lines()).unwrap_or_default(),
        staged: c.staged.map(|s| s.model),
    })
}

/// Builds `model` for `options` into the executable `output`.
pub fn build(model: &Path, output: &Path, options: &RunOptions) -> Result<Built, String> {
    check_output(output)?;
    let generated = generate(model, options)?;
    let source = source_root()?;
    let root = build_root(&source);
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let name = format!(
        "m{:016x}",
        fnv(&[
            absolute(model).to_string_lossy().as_bytes(),
            absolute(output).to_string_lossy().as_bytes(),
            format!("{:?}{:?}", options.target, options.planning).as_bytes(),
        ])
    );
    let dir = root.join("crates").join(&name);
    std::fs::create_dir_all(dir.join("src")).map_err(|e| format!("{}: cannot create it: {e}", dir.display()))?;
    for (file, bytes) in &generated.values {
        write_if_changed(&dir.join(file), bytes)?;
    }
    write_if_changed(&dir.join("src/main.rs"), generated.main_rs.as_bytes())?;
    write_if_changed(&dir.join("graph.bin"), &generated.graph)?;
    write_if_changed(&dir.join("constants.bin"), &generated.constants)?;
    write_if_changed(&dir.join("plan.bin"), &generated.plan)?;
    match &generated.other_plan {
        Some(plan) => write_if_changed(&dir.join("other_plan.bin"), plan)?,
        None => {
            let _ = std::fs::remove_file(dir.join("other_plan.bin"));
        }
    }
    let _ = std::fs::remove_file(dir.join("model.onnx"));
    match &generated.staged {
        Some(model) => write_if_changed(&dir.join("staged.onnx"), model)?,
        None => {
            let _ = std::fs::remove_file(dir.join("staged.onnx"));
        }
    }
    match &generated.object {
        Some(object) => write_if_changed(&dir.join("kernels.o"), object)?,
        None => {
            let _ = std::fs::remove_file(dir.join("kernels.o"));
        }
    }
    write_if_changed(&dir.join("Cargo.toml"), manifest(&name, &generated.kinds).as_bytes())?;
    write_if_changed(&dir.join("build.rs"), BUILD_RS.as_bytes())?;
    let lock = dir.join("Cargo.lock");
    if !lock.exists() {
        // The versions stowage itself was tested with, and no need to reach a registry.
        let _ = std::fs::copy(source.join("Cargo.lock"), &lock);
    }

    let progress = Progress::start(model);
    progress.phase("building the executable (the first build compiles stowage's crates: minutes)");
    let built = cargo_build(&dir, &root.join("target"), &name)?;
    progress.finish();
    let size = install(&built, output)?;
    // The executable now lives at `-o`: cargo's copies of it and the crate's copies of the model's bytes (each as
    // large as the model) go; the crate's sources stay, to be read.
    for file in ["graph.bin", "constants.bin", "staged.onnx"] {
        let _ = std::fs::remove_file(dir.join(file));
    }
    if let Ok(entries) = std::fs::read_dir(root.join("target/release/deps")) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&format!("{name}-")) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let _ = std::fs::remove_file(&built);
    Ok(Built {
        crate_dir: dir,
        executable: output.to_path_buf(),
        bytes: size,
        kernels: generated.kernels,
        copies_per_run: generated.copies_per_run,
        staged: generated.staged_lines,
    })
}

/// The model crate's manifest: one binary, depending by path on the driver (without its CLI) and on the crates of
/// the backends it was built for.
fn manifest(name: &str, kinds: &[crate::KindSource]) -> String {
    let mut deps = format!(
        "stowage-driver = {{ path = {:?}, default-features = false }}\n",
        Path::new(env!("CARGO_MANIFEST_DIR")).to_string_lossy()
    );
    for k in kinds {
        let features: Vec<String> = k.features.iter().map(|f| format!("{f:?}")).collect();
        deps.push_str(&format!(
            "{} = {{ path = {:?}, default-features = false, features = [{}] }}\n",
            k.package,
            k.manifest_dir,
            features.join(", ")
        ));
    }
    format!(
        "# @generated by stowage build. Do not edit: build again instead.\n\
         [package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\nbuild = \"build.rs\"\n\n\
         [[bin]]\nname = \"{name}\"\npath = \"src/main.rs\"\n\n\
         [dependencies]\n{deps}\n\
         # Its own workspace, wherever the shared build directory is.\n[workspace]\n\n\
         [profile.release]\ndebug = false\n"
    )
}

/// The model crate's build script: links the kernels' object file, when there is one, into the executable.
const BUILD_RS: &str = "// @generated by stowage build. Do not edit: build again instead.\n\
fn main() {\n    \
    let dir = std::env::var(\"CARGO_MANIFEST_DIR\").expect(\"cargo sets CARGO_MANIFEST_DIR\");\n    \
    if std::path::Path::new(&dir).join(\"kernels.o\").exists() {\n        \
        println!(\"cargo:rustc-link-arg-bins={dir}/kernels.o\");\n    \
    }\n    \
    println!(\"cargo:rerun-if-changed=kernels.o\");\n\
}\n";

/// Runs cargo on the model's crate; returns the executable it made.
fn cargo_build(dir: &Path, target_dir: &Path, name: &str) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(&cargo)
        .args(["build", "--release", "--offline", "--message-format=short", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .map_err(|e| format!("cannot run cargo ({}): {e}", Path::new(&cargo).display()))?;
    let log = dir.join("build.log");
    let _ = std::fs::write(&log, &out.stderr);
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        let first = text.lines().find(|l| l.contains("error")).unwrap_or("cargo failed");
        return Err(format!("cargo could not build the executable: {} (whole log: {})", first.trim(), log.display()));
    }
    Ok(target_dir.join("release").join(name))
}

/// Copies `built` to a temporary file beside `output` (a random name opened with `O_EXCL`, never through a
/// planted symlink), with `built`'s permissions, then renames it into place.
fn install(built: &Path, output: &Path) -> Result<u64, String> {
    let name = output.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let copy = || {
        let mut tmp = crate::staging::temporary(dir, &name)?;
        let size = std::io::copy(&mut std::fs::File::open(built)?, tmp.as_file_mut())?;
        tmp.as_file().set_permissions(std::fs::metadata(built)?.permissions())?;
        tmp.persist(output).map_err(|e| e.error)?;
        Ok::<_, std::io::Error>(size)
    };
    copy().map_err(|e| format!("-o {}: cannot write it: {e}", output.display()))
}

#[cfg(all(test, unix))]
mod tests {
    #[test]
    fn install_follows_no_symlink_planted_at_the_old_temporary_name() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let (built, outside, output) =
            (tmp.path().join("built"), tmp.path().join("precious"), tmp.path().join("bin/model"));
        std::fs::create_dir(tmp.path().join("bin")).expect("mkdir");
        std::fs::write(&built, b"\x7fELF").expect("writes");
        let mode = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o751);
        std::fs::set_permissions(&built, mode).expect("chmod");
        std::fs::write(&outside, b"precious").expect("writes");
        let old = tmp.path().join(format!("bin/.model.{}.partial", std::process::id()));
        std::os::unix::fs::symlink(&outside, &old).expect("symlink");
        assert_eq!(super::install(&built, &output), Ok(4));
        assert_eq!(std::fs::read(&outside).expect("reads"), b"precious");
        assert_eq!(std::fs::read(&output).expect("reads"), b"\x7fELF");
        let installed = std::fs::symlink_metadata(&output).expect("installed");
        use std::os::unix::fs::PermissionsExt;
        assert!(installed.is_file() && installed.permissions().mode() & 0o777 == 0o751, "{installed:?}");
        let entries = std::fs::read_dir(tmp.path().join("bin")).expect("lists").count();
        assert_eq!(entries, 2, "the executable and the planted link, nothing else");
    }
}
