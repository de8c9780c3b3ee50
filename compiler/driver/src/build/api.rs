//! Compiling a model into a crate at build time, the way prost-build compiles `.proto` files.
//!
//! Add the driver and the backends the model runs on, as dependencies (the generated code runs on them) and as
//! build dependencies (they plan and compile it):
//!
//! ```toml
//! [dependencies]
//! stowage-driver = { path = "…/compiler/driver" }
//! stowage-cpu = { path = "…/backends/cpu" }
//! [build-dependencies]
//! stowage-driver = { path = "…/compiler/driver", features = ["build"] }
//! stowage-cpu = { path = "…/backends/cpu" }
//! ```
//!
//! Write `build.rs`, registering the backends (a backend of your own is one more entry):
//!
//! ```no_run
//! fn main() -> Result<(), stowage_driver::build::BuildError> {
//!     stowage_driver::build::Build::new()
//!         .backends(&[/* &stowage_cpu::KIND */])
//!         .target("cpu")
//!         .compile("models/squeezenet.onnx")?;
//!     Ok(())
//! }
//! ```
//!
//! and include the module it writes to `OUT_DIR`:
//!
//! ```text
//! mod squeezenet {
//!     include!(concat!(env!("OUT_DIR"), "/squeezenet.rs"));
//! }
//!
//! let model = squeezenet::Model::new()?;
//! let image = stowage_driver::model::Aligned::<squeezenet::Data0>::boxed();
//! let out = model.run(&*image)?;
//! let scores: &[f32] = out.softmaxout_1.as_slice()?;
//! ```
//!
//! `run` takes one argument per graph input, a nested array of its element type and shape, so a wrong shape or
//! type is a compile error. Kernels a backend compiles ahead of time (the CPU's) are compiled now, into a static
//! library linked into the crate;
//! the model and the plan's copies (one line each, with the reason) are in the generated source.

use std::path::{Path, PathBuf};

use stowage_compiler::onnx::ImportConfig;
use stowage_compiler::plan::Precision;

use super::module::module_rs;
use super::names;
use super::{compile, write_if_changed};
use crate::pipeline::{Planning, RunOptions};
use crate::{Registry, TargetKind};

/// Why a model could not be compiled into a module.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The model cannot be read, imported, planned for the target, or given a typed form.
    #[error("{0}")]
    Model(String),
    /// Neither [`Build::out_dir`] nor `OUT_DIR` says where to write (not run from a build script).
    #[error("OUT_DIR is not set: run from a build script, or call Build::out_dir")]
    NoOutDir,
    /// A file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What happened.
        source: std::io::Error,
    },
    /// The kernels' object file could not be archived into a static library.
    #[error("cannot archive the kernels into {path} with `ar`: {message}")]
    Archive {
        /// The archive.
        path: PathBuf,
        /// What `ar` said.
        message: String,
    },
}

/// How to compile models into modules: the backends, target, fixed shapes, copy budget, where to write.
#[derive(Clone)]
pub struct Build {
    kinds: Vec<&'static dyn TargetKind>,
    target: String,
    input_shapes: Vec<(String, Vec<usize>)>,
    max_copies: Option<usize>,
    max_copy_bytes: Option<usize>,
    out_dir: Option<PathBuf>,
    module_name: Option<String>,
    precision: Option<Precision>,
    target_precisions: Vec<(String, Precision)>,
}

impl Default for Build {
    fn default() -> Self {
        Build::new()
    }
}

/// A module's files, in memory: what [`Build::compile`] writes to `OUT_DIR`.
#[derive(Debug)]
pub struct GeneratedModule {
    /// The module's name (its file is `{name}.rs`, its static library `libstowage_{name}.a`).
    pub name: String,
    /// The module's source.
    pub source: String,
    /// Files the source embeds: the optimised graph (`{name}_graph.bin`), its constants (`{name}_constants.bin`),
    /// its plan (`{name}_plan.bin`, and `{name}_other_plan.bin` where the other path has one) and fixed input
    /// values, by file name.
    pub embedded: Vec<(String, Vec<u8>)>,
    /// The object file of the kernels compiled ahead of time, when a target compiles any.
    pub object: Option<Vec<u8>>,
}

impl Build {
    /// No backends yet ([`Build::backends`]), the `cpu` target, shapes as the model declares them, no copy
    /// budget, written to `OUT_DIR`.
    pub fn new() -> Build {
        Build {
            kinds: Vec::new(),
            target: "cpu".into(),
            input_shapes: Vec::new(),
            max_copies: None,
            max_copy_bytes: None,
            out_dir: None,
            module_name: None,
            precision: None,
            target_precisions: Vec::new(),
        }
    }

    /// Registers target kinds, after those registered before, in order of lookup (`stowage_cli::BACKENDS`, or
    /// `&[&stowage_cpu::KIND, &my_backend::KIND]`).
    pub fn backends(&mut self, kinds: &[&'static dyn TargetKind]) -> &mut Self {
        self.kinds.extend_from_slice(kinds);
        self
    }

    /// The target, or a list in order of preference, as `stowage run --target` takes it.
    ///
    /// ```
    /// stowage_driver::build::Build::new().target("opencl,cpu");
    /// ```
    pub fn target(&mut self, target: impl Into<String>) -> &mut Self {
        self.target = target.into();
        self
    }

    /// Fixes an input's shape (its symbolic dimensions included), as `--input-shape` does.
    ///
    /// ```
    /// stowage_driver::build::Build::new().input_shape("images", [1, 3, 224, 224]);
    /// ```
    pub fn input_shape(&mut self, input: impl Into<String>, shape: impl Into<Vec<usize>>) -> &mut Self {
        self.input_shapes.push((input.into(), shape.into()));
        self
    }

    /// Fails the build when a run would make more copies, or copy more bytes, than this.
    ///
    /// ```
    /// stowage_driver::build::Build::new().copy_budget(Some(0), None);
    /// ```
    pub fn copy_budget(&mut self, copies: Option<usize>, bytes: Option<usize>) -> &mut Self {
        self.max_copies = copies;
        self.max_copy_bytes = bytes;
        self
    }

    /// The arithmetic precision asked of every target, as `--precision P` asks it (fp32 by default). The plan
    /// built in keeps what was asked; a target opened at start-up that cannot is refused then, or falls back as
    /// its backend documents and the report shows.
    ///
    /// ```
    /// use stowage_driver::build::{Build, Precision};
    /// Build::new().target("opencl").precision(Precision::Tf32);
    /// ```
    pub fn precision(&mut self, precision: Precision) -> &mut Self {
        self.precision = Some(precision);
        self
    }

    /// The arithmetic precision asked of one target (named as in [`Build::target`], or by its memory space), as
    /// `--precision TARGET=P` asks it.
    ///
    /// ```
    /// use stowage_driver::build::{Build, Precision};
    /// Build::new().target("opencl,cpu").target_precision("opencl", Precision::Tf32);
    /// ```
    pub fn target_precision(&mut self, target: impl Into<String>, precision: Precision) -> &mut Self {
        self.target_precisions.push((target.into(), precision));
        self
    }

    /// Writes here instead of `OUT_DIR`.
    ///
    /// ```
    /// stowage_driver::build::Build::new().out_dir("target/generated");
    /// ```
    pub fn out_dir(&mut self, dir: impl Into<PathBuf>) -> &mut Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Names the module (by default the model file's stem, made an identifier: `squeezenet.onnx` → `squeezenet`).
    ///
    /// ```
    /// stowage_driver::build::Build::new().module_name("classifier");
    /// ```
    pub fn module_name(&mut self, name: impl Into<String>) -> &mut Self {
        self.module_name = Some(name.into());
        self
    }

    fn options(&self) -> Result<RunOptions, BuildError> {
        let registry = Registry::new(&self.kinds).map_err(|e| BuildError::Model(e.to_string()))?;
        let mut config = ImportConfig::new();
        for (name, shape) in &self.input_shapes {
            config = config.input_shape(name.clone(), shape.clone());
        }
        Ok(RunOptions {
            target: self.target.clone(),
            config,
            planning: Planning {
                max_copies: self.max_copies,
                max_copy_bytes: self.max_copy_bytes,
                precision: self.precision,
                target_precisions: self.target_precisions.clone(),
                ..Planning::default()
            },
            ..RunOptions::new(registry)
        })
    }

    /// Plans `model` and generates its module in memory, writing nothing.
    pub fn generate(&self, model: impl AsRef<Path>) -> Result<GeneratedModule, BuildError> {
        let model = model.as_ref();
        let stem = model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
        let name = names::snake(self.module_name.as_deref().unwrap_or(&stem));
        let c = compile(model, &self.options()?, &format!("stowage_{name}_k")).map_err(BuildError::Model)?;
        let files: Vec<(String, String)> =
            c.values.iter().map(|(input, file, _)| (input.clone(), format!("{name}_{file}"))).collect();
        let outputs = c.staged.as_ref().map(|s| s.outputs.as_slice());
        let source = module_rs(&c.source(true, &files), &name, &c.prepared.cx.graph, &c.prepared.plan, outputs)
            .map_err(|e| BuildError::Model(format!("{}: {e}", model.display())))?;
        let mut embedded = vec![
            (format!("{name}_graph.bin"), c.encoded.graph.clone()),
            (format!("{name}_constants.bin"), c.encoded.constants.clone()),
            (format!("{name}_plan.bin"), c.plan_bytes.clone()),
        ];
        if let Some((_, _, other)) = &c.other {
            embedded.push((format!("{name}_other_plan.bin"), other.clone()));
        }
        if let Some(staged) = &c.staged {
            embedded.push((format!("{name}_staged.onnx"), staged.model.clone()));
        }
        embedded.extend(files.iter().zip(&c.values).map(|((_, file), (_, _, bytes))| (file.clone(), bytes.clone())));
        Ok(GeneratedModule { name, source, embedded, object: c.object })
    }

    /// Generates `model`'s module and writes it to the output folder as `{name}.rs`, with the files it embeds and
    /// `libstowage_{name}.a`; files whose contents did not change are left alone. Prints the build-script lines
    /// that link the library and rerun when the model changes. Returns the module's path.
    pub fn compile(&self, model: impl AsRef<Path>) -> Result<PathBuf, BuildError> {
        let model = model.as_ref();
        println!("cargo:rerun-if-changed={}", model.display());
        let out = match &self.out_dir {
            Some(dir) => dir.clone(),
            None => std::env::var_os("OUT_DIR").map(PathBuf::from).ok_or(BuildError::NoOutDir)?,
        };
        std::fs::create_dir_all(&out).map_err(|source| BuildError::Io { path: out.clone(), source })?;
        let generated = self.generate(model)?;
        let write = |file: &str, bytes: &[u8]| {
            let path = out.join(file);
            write_if_changed(&path, bytes)
                .map_err(|message| BuildError::Io { path: path.clone(), source: std::io::Error::other(message) })
        };
        for (file, bytes) in &generated.embedded {
            write(file, bytes)?;
        }
        let name = &generated.name;
        if let Some(object_bytes) = &generated.object {
            let object = out.join(format!("stowage_{name}.o"));
            let archive = out.join(format!("libstowage_{name}.a"));
            let unchanged = std::fs::read(&object).is_ok_and(|old| old == *object_bytes) && archive.exists();
            if !unchanged {
                write(&format!("stowage_{name}.o"), object_bytes)?;
                let _ = std::fs::remove_file(&archive);
                let status = std::process::Command::new(std::env::var_os("AR").unwrap_or_else(|| "ar".into()))
                    .arg("crs")
                    .arg(&archive)
                    .arg(&object)
                    .output()
                    .map_err(|e| BuildError::Archive { path: archive.clone(), message: e.to_string() })?;
                if !status.status.success() {
                    let message = String::from_utf8_lossy(&status.stderr).trim().to_string();
                    return Err(BuildError::Archive { path: archive, message });
                }
            }
            println!("cargo:rustc-link-search=native={}", out.display());
            println!("cargo:rustc-link-lib=static=stowage_{name}");
        }
        let module = out.join(format!("{name}.rs"));
        write(&format!("{name}.rs"), generated.source.as_bytes())?;
        Ok(module)
    }
}
