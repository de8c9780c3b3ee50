//! The `stowage` command. The contract it keeps is in DESIGN.md ("CLI contract").

mod demo;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use stowage_cli::options::{PlanningFlags, RunFlags, ShapeOptions};
use stowage_cli::run::{self, finish};
use stowage_cli::session::RunOptions;
use stowage_cli::show::{self, PlanFormat};
use stowage_compiler::Context;

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
        /// Kernel threads (the CPU's throughput estimate scales with them).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
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
    },
    /// List the targets this build of stowage can compile for.
    Targets,
    /// Compile and run a bundled model, and show what ran where and what moved.
    Demo {
        /// Kernel threads.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        threads: u32,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo { threads } => finish(demo::run(threads as usize)),
        Command::Import { model, shapes, raw, timings } => finish(import(&model, &shapes, raw, timings)),
        Command::Run { model, target, run, shapes, planning } => {
            let result = shapes.config().and_then(|config| {
                let options = RunOptions {
                    target: target.clone(),
                    threads: run.threads as usize,
                    repeat: run.repeat as usize,
                    config,
                    planning: planning.planning()?,
                    read_outputs: run.output_dir.is_some(),
                    ..RunOptions::default()
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
                    ..RunOptions::default()
                };
                show::plan(&model, format, output.as_deref(), &options)
            });
            finish(result)
        }
        Command::Build { model, target, output, shapes, planning } => {
            let result = shapes.config().and_then(|config| {
                let options = RunOptions { target, config, planning: planning.planning()?, ..RunOptions::default() };
                let built = stowage_cli::build::build(&model, &output, &options)?;
                Ok(format!(
                    "built {}: {} bytes, {} CPU kernels linked in, {} copies per run planned (crate: {})\n",
                    built.executable.display(),
                    built.bytes,
                    built.kernels,
                    built.copies_per_run,
                    built.crate_dir.display()
                ))
            });
            finish(result)
        }
        Command::Targets => {
            println!("cpu       host memory, 128-byte aligned; Cranelift-generated fused kernels, AVX-512 products");
            match stowage_opencl::describe_devices() {
                Ok(devices) => {
                    for d in devices {
                        println!("{d}");
                    }
                    println!("opencl:discrete  any OpenCL device through the discrete path (staged copies)");
                }
                Err(e) => println!("opencl    none: {e}"),
            }
            ExitCode::SUCCESS
        }
    }
}

fn import(model: &std::path::Path, shapes: &ShapeOptions, raw: bool, timings: bool) -> Result<String, String> {
    let config = shapes.config()?;
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
