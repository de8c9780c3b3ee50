//! The `stowage` command. The contract it keeps is in DESIGN.md ("CLI contract").

mod options;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use stowage_compiler::Context;

use options::ShapeOptions;

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
    },
    /// Show where every tensor lives, every copy and why, and the memory peak.
    Plan {
        /// The ONNX model.
        model: PathBuf,
    },
    /// Build a standalone executable for a model.
    Build {
        /// The ONNX model.
        model: PathBuf,
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
    Demo,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let pending = match cli.command {
        Command::Demo => {
            println!("stowage demo: not yet: the bundled model runs once the CPU backend issue lands.");
            println!("Until then, `stowage import MODEL.onnx` shows the IR stowage compiles a model to.");
            return ExitCode::SUCCESS;
        }
        Command::Import { model, shapes, raw, timings } => {
            return match import(&model, &shapes, raw, timings) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Run { .. } => "`stowage run` comes with the CPU backend issue",
        Command::Plan { .. } => "`stowage plan` comes with the planner issue",
        Command::Build { .. } => "`stowage build` comes with the generated binaries issue",
        Command::Targets => "`stowage targets` comes with the CPU backend issue",
    };
    eprintln!("error: not yet: {pending}");
    ExitCode::FAILURE
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
