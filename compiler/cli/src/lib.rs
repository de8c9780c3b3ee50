//! The `stowage` command's library: the backends it registers ([`BACKENDS`], the one list in the CLI that names
//! them) over the driver, and the driver's modules under the names the workspace's suites use.

pub use stowage_driver::build::{self, Build, BuildError};
/// The run pipeline (`stowage_driver::pipeline`), under the name the suites have always used.
pub use stowage_driver::pipeline as session;
pub use stowage_driver::{exe, flags as options, model, run, show};
use stowage_driver::{Registry, TargetKind};

/// The backends the `stowage` binary registers, in order of lookup.
pub const BACKENDS: &[&dyn TargetKind] = &[&stowage_cpu::KIND, &stowage_opencl::KIND];

/// [`BACKENDS`] as a registry.
pub fn registry() -> Registry {
    // The list above is constant; `registered_backends_are_distinct` checks it has no name twice.
    Registry::new(BACKENDS).expect("the CLI's backends have distinct names")
}

/// `stowage run`'s defaults over [`registry`]: what the suites start from.
pub fn run_options() -> session::RunOptions {
    session::RunOptions::new(registry())
}

/// A [`Build`] with [`BACKENDS`] registered.
pub fn build() -> Build {
    let mut b = Build::new();
    b.backends(BACKENDS);
    b
}

/// Compiles `model` for the CPU into `OUT_DIR` with the default settings and [`BACKENDS`].
pub fn compile_model(model: impl AsRef<std::path::Path>) -> Result<std::path::PathBuf, BuildError> {
    build().compile(model)
}

#[cfg(test)]
mod tests {
    #[test]
    fn registered_backends_are_distinct() {
        let names = stowage_driver::Registry::new(super::BACKENDS).map(|r| r.names());
        assert_eq!(names.ok(), Some(vec!["cpu", "opencl"]));
    }
}
