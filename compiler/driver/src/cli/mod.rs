//! The `stowage` command line, for any binary that registers its backends: `stowage-cli`'s `main` is
//! `stowage_driver::cli::main(stowage_cli::BACKENDS)`, and a backend author's own CLI is the same line with their
//! kind added. The contract it keeps is in DESIGN.md ("CLI contract").

mod demo;
pub mod flags;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use stowage_compiler::onnx::ImportConfig;
use stowage_compiler::Context;

use crate::flags::RunFlags;
use crate::pipeline::RunOptions;
use crate::run::{self, finish};
use crate::show::{self, PlanFormat};
use crate::{Registry, TargetKind};
use flags::{PlanningFlags, ShapeOptions};

#[derive(Parser)]
#[command(name = "stowage", version, about = "Ahead-of-time model compiler: a tensor is moved only when it must be.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile and run a model in-process.
    Run {
        /// The ONNX model.
        model: PathBuf,
        /// Target, or a comma-separated list in order of preference.
        #[arg(long, default_value = "cpu")]
        target: String,
        #[command(flatten)]
        run: RunFlags,
        #[command(flatten)]
        shapes: ShapeOptions,
        #[command(flatten)]
        planning: PlanningFlags,
    },
    /// Show where every node runs and why, every copy and why, and each memory space's peak.
    Plan {
        /// The ONNX model.
        model: PathBuf,
        /// Target, or a comma-separated list in order of preference.
        #[arg(long, default_value = "cpu")]
        target: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: PlanFormat,
        /// Write the plan here instead of to stdout (written whole or not at all).
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
        /// Kernel threads (the CPU's throughput estimate scales with them; at most 1024).
        #[arg(long, default_value_t = 1, value_parser = crate::flags::parse_threads)]
        threads: u32,
        #[command(flatten)]
        shapes: ShapeOptions,
        #[command(flatten)]
        planning: PlanningFlags,
    },
    /// Build a standalone executable for a model. It takes run's --input, --output-dir, --report, --repeat and
    /// --threads.
    Build {
        /// The ONNX model.
        model: PathBuf,
        /// Target, or a comma-separated list in order of preference.
        #[arg(long, default_value = "cpu")]
        target: String,
        /// The executable to write (written whole or not at all).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        #[command(flatten)]
        shapes: ShapeOptions,
        #[command(flatten)]
        planning: PlanningFlags,
    },
    /// Import a model and print stowage's IR after the import passes.
    Import {
        /// The ONNX model.
        model: PathBuf,
        #[command(flatten)]
        shapes: ShapeOptions,
        /// Print the IR as imported, before constant folding and the other passes.
        #[arg(long)]
        raw: bool,
        /// Print one timing line per pass to stderr.
        #[arg(long)]
        timings: bool,
        /// Check only: list every op type the model uses that stowage does not support, one a line (op, domain,
        /// nodes, first node), and exit 1 if there is one; else import it and say so.
        #[arg(long, conflicts_with_all = ["raw", "timings"])]
        check: bool,
    },
    /// List the targets this build of stowage can compile for.
    Targets,
    /// Compile and run a bundled model, and show what ran where and what moved.
    Demo {
        /// Kernel threads (at most 1024).
        #[arg(long, default_value_t = 1, value_parser = crate::flags::parse_threads)]
        threads: u32,
    },
}

/// Runs the `stowage` command line over `kinds`, the backends this binary registers, in order of lookup. Two
/// kinds with one name are an error, naming both, before any command runs.
pub fn main(kinds: &[&'static dyn TargetKind]) -> ExitCode {
    let cli = Cli::parse();
    let registry = match Registry::new(kinds) {
        Ok(r) => r,
        Err(e) => return finish(Err(e.to_string())),
    };
    let defaults = || RunOptions::new(registry.clone());
    match cli.command {
        Command::Demo { threads } => finish(demo::run(threads as usize, defaults())),
        Command::Import { model, shapes, check: true, .. } => finish(check_import(&model, &shapes)),
        Command::Import { model, shapes, raw, timings, .. } => finish(import(&model, &shapes, raw, timings)),
        Command::Run { model, target, run, shapes, planning } => {
            let result = shapes.config().and_then(|config| {
                let options = RunOptions {
                    target: target.clone(),
                    threads: run.threads as usize,
                    repeat: run.repeat as usize,
                    config,
                    planning: planning.planning()?,
                    read_outputs: run.output_dir.is_some(),
                    ..defaults()
                };
                run::run(&model, &run, &options)
            });
            finish(result)
        }
        Command::Plan { model, target, format, output, threads, shapes, planning } => {
            let result = shapes.config().and_then(|config| {
                let options = RunOptions {
                    target,
                    threads: threads as usize,
                    config,
                    planning: planning.planning()?,
                    ..defaults()
                };
                show::plan(&model, format, output.as_deref(), &options)
            });
            finish(result)
        }
        Command::Build { model, target, output, shapes, planning } => {
            let result = shapes.config().and_then(|config| {
                let options = RunOptions { target, config, planning: planning.planning()?, ..defaults() };
                let built = crate::build::build(&model, &output, &options)?;
                let mut text = String::new();
                for line in &built.staged {
                    text.push_str(&format!("staged: {}\n", crate::run::shown(line)));
                }
                let first = if built.staged.is_empty() { "" } else { " by its first part" };
                text.push_str(&format!(
                    "built {}: {} bytes, {} CPU kernels linked in, {} copies per run planned{first} (crate: {})\n",
                    built.executable.display(),
                    built.bytes,
                    built.kernels,
                    built.copies_per_run,
                    built.crate_dir.display()
                ));
                Ok(text)
            });
            finish(result)
        }
        Command::Targets => {
            for kind in registry.kinds() {
                for line in kind.list() {
                    println!("{line}");
                }
            }
            ExitCode::SUCCESS
        }
    }
}

/// `stowage import --check`: the unsupported op types one a line on stdout (and one error line), else an import.
fn check_import(model: &std::path::Path, shapes: &ShapeOptions) -> Result<String, String> {
    let config = with_subgraphs(shapes.config()?);
    let bytes = std::fs::read(model).map_err(|e| format!("{}: cannot read the model: {e}", model.display()))?;
    let proto = stowage_compiler::onnx::decode_within(&bytes, config.value_limit())
        .map_err(|e| format!("{}: {e}", model.display()))?;
    let missing = stowage_compiler::onnx::unsupported_ops(&proto);
    // The import below reads and decodes the file again: only one decoded copy at a time.
    drop((proto, bytes));
    if !missing.is_empty() {
        for o in &missing {
            println!("{}\t{}\t{} nodes\tfirst '{}'", o.op, o.domain, o.nodes, o.first);
        }
        let n = missing.len();
        return Err(format!("{}: {n} op type{} not supported", model.display(), if n == 1 { " is" } else { "s are" }));
    }
    let cx = Context::import(model, &config).map_err(|e| e.to_string())?;
    Ok(format!("{}: every op is supported; {} nodes imported\n", model.display(), cx.graph.order().len()))
}

/// `config` keeping subgraphs: an If on a condition known only at run time prints with its branches, and a Loop
/// or Scan the import cannot unroll with its body (`ir/subgraph.rs`), as the CPU takes them; a target list without
/// a kind that runs them whole gets the `Where` form, a top-level loop cut in stages, and the import's error for
/// the others (`stowage plan`).
fn with_subgraphs(config: ImportConfig) -> ImportConfig {
    config.keep_whole("If").keep_whole("Loop").keep_whole("Scan")
}

fn import(model: &std::path::Path, shapes: &ShapeOptions, raw: bool, timings: bool) -> Result<String, String> {
    let config = with_subgraphs(shapes.config()?);
    let mut cx = Context::import(model, &config).map_err(|e| e.to_string())?;
    if !raw {
        cx.optimize().map_err(|e| e.to_string())?;
    }
    if timings {
        for t in cx.timings() {
            eprintln!("{t}");
        }
    }
    Ok(cx.print())
}
