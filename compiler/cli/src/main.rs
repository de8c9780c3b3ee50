//! The `stowage` command: the driver's CLI over the backends this crate registers. The contract it keeps is in
//! DESIGN.md ("CLI contract").
//!
//! The command allocates through mimalloc: a run of a small model is hundreds of steps, each making a few small
//! buffers (its outputs' tensors and layouts), and glibc's allocator took a third of such a run (openWakeWord's
//! "hey mycroft" classifier, 400 steps). The library crates leave the allocator to the program that links them.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    stowage_driver::cli::main(stowage_cli::BACKENDS)
}
