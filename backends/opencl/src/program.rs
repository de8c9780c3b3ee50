//! OpenCL programs: built once per process and target, and cached on disk keyed by the device and the source's
//! hash, so that a second start loads the device binary instead of compiling again. Kernels are launched on the
//! target's in-order queue; each launch records its event on the buffers it writes, so waiting for one of them waits
//! for exactly that work.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use opencl3::kernel::Kernel;
use opencl3::memory::ClMem as _;
use opencl3::program::Program;

use crate::buffer::ClBuffer;
use crate::device::Target;
use crate::error::{code_name, ClError, Result};

/// Where built programs are kept: `$STOWAGE_CACHE_DIR/opencl`, else `$XDG_CACHE_HOME/stowage/opencl`, else
/// `$HOME/.cache/stowage/opencl`; `None` when none is set (then nothing is cached on disk).
pub fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("STOWAGE_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("stowage")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("stowage")))?;
    Some(base.join("opencl"))
}

/// Whether stowage keeps the programs of a device of `platform` in its disk cache. PoCL keeps its own kernel cache
/// (keyed by source and options, holding the work-group functions it generated for each local size) unless
/// `POCL_KERNEL_CACHE=0`, and asking it for a program's binaries makes it generate every kernel's work-group function
/// a second time, for any local size: random-weight DenseNet-121 took 89 s from cold caches with stowage's disk
/// cache and 38 s without, and 0.7 s on the second start from PoCL's. `STOWAGE_OPENCL_DISK_CACHE=always` or `never`
/// decides for every device instead.
pub fn keeps_on_disk(platform: &str) -> bool {
    match std::env::var("STOWAGE_OPENCL_DISK_CACHE").as_deref() {
        Ok("always") => true,
        Ok("never") => false,
        _ => platform != "Portable Computing Language" || std::env::var("POCL_KERNEL_CACHE").as_deref() == Ok("0"),
    }
}

/// How programs of a target were obtained (for tests and reports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuildStats {
    /// Compiled from source by the device's compiler.
    pub compiled: usize,
    /// Loaded from the disk cache.
    pub loaded: usize,
    /// Found already built in this process.
    pub reused: usize,
}

impl Target {
    /// The program for `source`, built for this target's device: from this process's programs, else the disk cache,
    /// else compiled (and then cached). A source that does not compile is [`ClError::Build`] with the compiler's
    /// log, naming `op`.
    /// Every kernel's buffer parameters are rewritten to a base and a byte offset first (`codegen::offsets`).
    pub fn program(&self, source: &str, op: &str) -> Result<Arc<Program>> {
        let inner = &self.inner;
        let rewritten = crate::codegen::offsets::with_offsets(source).map_err(|e| ClError::Build {
            space: inner.space.to_string(),
            op: op.into(),
            log: e.to_string(),
        })?;
        let source = rewritten.as_str();
        let options = build_options();
        let mut h = DefaultHasher::new();
        (&inner.info.platform, &inner.info.name, &inner.driver, source, &options).hash(&mut h);
        let key = h.finish();
        let mut programs = inner.programs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = programs.get(&key) {
            inner.stats.reused.fetch_add(1, Ordering::Relaxed);
            return Ok(Arc::clone(p));
        }
        let file =
            keeps_on_disk(&inner.info.platform).then(cache_dir).flatten().map(|d| d.join(format!("{key:016x}.bin")));
        let device = inner.device.id();
        let loaded = file.as_ref().and_then(|f| std::fs::read(f).ok()).and_then(|binary| {
            // SAFETY: the device belongs to the target's context.
            let mut p = unsafe { Program::create_from_binary(&inner.context, &[device], &[&binary]) }.ok()?;
            p.build(&[device], "").ok()?;
            Some(p)
        });
        let program = match loaded {
            Some(p) => {
                inner.stats.loaded.fetch_add(1, Ordering::Relaxed);
                p
            }
            None => {
                let space = inner.space.to_string();
                let mut p = Program::create_from_source(&inner.context, source).map_err(|e| ClError::Call {
                    space: space.clone(),
                    call: "clCreateProgramWithSource",
                    code: code_name(e.0),
                })?;
                if let Err(e) = p.build(&[device], &options) {
                    let log = p.get_build_log(device).unwrap_or_default();
                    let log = if log.trim().is_empty() { code_name(e.0) } else { log.trim().to_string() };
                    return Err(ClError::Build { space, op: op.into(), log });
                }
                inner.stats.compiled.fetch_add(1, Ordering::Relaxed);
                if let (Some(file), Ok(binaries)) = (&file, p.get_binaries()) {
                    if let Some(binary) = binaries.first().filter(|b| !b.is_empty()) {
                        store(file, binary);
                    }
                }
                p
            }
        };
        let program = Arc::new(program);
        programs.insert(key, Arc::clone(&program));
        Ok(program)
    }

    /// How this target's programs were obtained so far.
    pub fn build_stats(&self) -> BuildStats {
        let s = &self.inner.stats;
        BuildStats {
            compiled: s.compiled.load(Ordering::Relaxed),
            loaded: s.loaded.load(Ordering::Relaxed),
            reused: s.reused.load(Ordering::Relaxed),
        }
    }

    /// Kernel `name` of `program`.
    pub fn kernel(&self, program: &Program, name: &str) -> Result<Kernel> {
        Kernel::create(program, name).map_err(|e| ClError::Call {
            space: self.inner.space.to_string(),
            call: "clCreateKernel",
            code: code_name(e.0),
        })
    }

    /// Runs `kernel` over `global` work items (`local`: the work-group shape, or the device's choice) with `args`,
    /// after the work writing its buffer arguments; records the launch as the last write of `writes`.
    pub fn launch(
        &self,
        kernel: &Kernel,
        args: &[Arg<'_>],
        global: &[usize],
        local: Option<&[usize]>,
        writes: &[&ClBuffer],
    ) -> Result<Option<Arc<opencl3::event::Event>>> {
        let space = &self.inner.space;
        let err = |call: &'static str| crate::device::call_err(space.name(), call);
        // A buffer takes two parameters (its base and its offset), anything else one.
        let mut next = 0u32;
        for a in args {
            let i = next;
            next += if matches!(a, Arg::Buf(_)) { 2 } else { 1 };
            // SAFETY: each argument is of the type the generated kernel declares at that index (the generators
            // emit the signature and the argument list together, and `program` made each buffer parameter a
            // base and a `ulong` offset), and buffers are live memory objects.
            unsafe {
                match a {
                    Arg::Buf(b) => {
                        let (mem, offset) = b.kernel_arg();
                        kernel.set_arg(i, &mem.get()).and_then(|_| kernel.set_arg(i + 1, &offset))
                    }
                    Arg::I32(v) => kernel.set_arg(i, v),
                    Arg::U32(v) => kernel.set_arg(i, v),
                    Arg::F32(v) => kernel.set_arg(i, v),
                    Arg::I64(v) => kernel.set_arg(i, v),
                }
            }
            .map_err(err("clSetKernelArg"))?;
        }
        let Some(event) = self.enqueue_kernel(kernel, global, local)? else {
            return Ok(None);
        };
        for a in args {
            if let Arg::Buf(b) = a {
                b.read_by(&event);
            }
        }
        for w in writes {
            w.written_by_shared(Arc::clone(&event));
        }
        Ok(Some(event))
    }

    /// Sets `kernel`'s arguments to the buffers `args` (memory objects and byte offsets, as
    /// [`crate::replay::Bound`] holds them), each as the base and `ulong` offset the generated kernels take.
    pub(crate) fn set_buffer_args(&self, kernel: &Kernel, args: &[(usize, u64)]) -> Result<()> {
        for (k, &(mem, offset)) in args.iter().enumerate() {
            let i = 2 * k as u32;
            let mem = mem as opencl3::types::cl_mem;
            // SAFETY: every argument of the kernels a program runs is a buffer, declared as a global pointer and
            // a `ulong` offset (`program` makes each buffer parameter such a pair), and `mem` is a memory object
            // the run holds alive until its commands are done.
            unsafe { kernel.set_arg(i, &mem).and_then(|_| kernel.set_arg(i + 1, &offset)) }
                .map_err(crate::device::call_err(self.inner.space.name(), "clSetKernelArg"))?;
        }
        Ok(())
    }

    /// Enqueues `kernel`, its arguments set, over `global` work items (`local`: the work-group shape, or the
    /// device's choice); `None` for an empty launch, which is not made.
    pub(crate) fn enqueue_kernel(
        &self,
        kernel: &Kernel,
        global: &[usize],
        local: Option<&[usize]>,
    ) -> Result<Option<Arc<opencl3::event::Event>>> {
        let space = &self.inner.space;
        let err = |call: &'static str| crate::device::call_err(space.name(), call);
        if global.contains(&0) {
            return Ok(None);
        }
        // A device lost (see `Target::lose_device_after`): the launch fails as a driver reports it.
        let left = &self.inner.lose_after;
        if left.load(std::sync::atomic::Ordering::SeqCst) != usize::MAX
            && left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| Some(n.saturating_sub(1)))
                .is_ok_and(|n| n == 0)
        {
            return Err(ClError::Call {
                space: space.to_string(),
                call: "clEnqueueNDRangeKernel",
                code: code_name(opencl3::error_codes::CL_DEVICE_NOT_AVAILABLE),
            });
        }
        let local_ptr = local.map_or(std::ptr::null(), <[usize]>::as_ptr);
        // No wait list: every command of a target goes to its one in-order queue, so a launch starts after the
        // commands that wrote its arguments. The event is kept on the buffers for `ClBuffer::wait` and maps.
        // SAFETY: `global` (and `local`, when given) hold `global.len()` sizes; the caller set every argument.
        let event = unsafe {
            self.inner.queue.enqueue_nd_range_kernel(
                kernel.get(),
                global.len() as u32,
                std::ptr::null(),
                global.as_ptr(),
                local_ptr,
                &[],
            )
        }
        .map_err(err("clEnqueueNDRangeKernel"))?;
        Ok(Some(Arc::new(event)))
    }
}

/// A kernel argument.
#[derive(Clone, Copy)]
pub enum Arg<'a> {
    /// A buffer (`__global T*`).
    Buf(&'a ClBuffer),
    /// `int`.
    I32(i32),
    /// `uint`.
    U32(u32),
    /// `float`.
    F32(f32),
    /// `long`.
    I64(i64),
}

/// Writes `bytes` to `file` through a temporary file and a rename, so that a reader never sees half a binary. The
/// temporary file is made by `tempfile` in the cache folder: a random name opened with `O_EXCL`, so a name planted
/// there beforehand (a symlink) is never written through, and two threads storing one program never share one. A
/// failure only means the next start compiles again.
fn store(file: &std::path::Path, bytes: &[u8]) {
    use std::io::Write;
    let Some(dir) = file.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let Ok(mut tmp) = tempfile::Builder::new().prefix(".program").suffix(".partial").tempfile_in(dir) else {
        return;
    };
    if tmp.write_all(bytes).is_ok() {
        // A failed rename drops `tmp`, which removes it.
        let _ = tmp.persist(file);
    }
}

/// The options programs are built with: OpenCL C 1.2, and for measuring, what `STOWAGE_OPENCL_BUILD_OPTIONS` adds
/// (a driver's own, such as NVIDIA's `-cl-nv-maxrregcount=128`, which caps the registers a kernel's items take).
fn build_options() -> String {
    match std::env::var("STOWAGE_OPENCL_BUILD_OPTIONS") {
        Ok(extra) if !extra.trim().is_empty() => format!("-cl-std=CL1.2 {}", extra.trim()),
        _ => "-cl-std=CL1.2".to_string(),
    }
}

#[cfg(test)]
mod tests {
    /// A symlink planted at the name the cache used to stage through (`KEY.tmp<pid>-<n>`) is left alone, and no
    /// temporary file is left beside the stored program.
    #[cfg(unix)]
    #[test]
    fn storing_a_program_follows_no_planted_name() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let (dir, precious) = (tmp.path().join("opencl"), tmp.path().join("precious"));
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(&precious, b"precious").expect("writes");
        let file = dir.join("00000000000000ab.bin");
        for n in 0..4 {
            let old = file.with_extension(format!("tmp{}-{n}", std::process::id()));
            std::os::unix::fs::symlink(&precious, old).expect("symlink");
        }
        super::store(&file, b"binary");
        super::store(&file, b"binary 2");
        assert_eq!(std::fs::read(&precious).expect("reads"), b"precious");
        assert_eq!(std::fs::read(&file).expect("reads"), b"binary 2");
        let partial = std::fs::read_dir(&dir)
            .expect("lists")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"));
        assert_eq!(partial.count(), 0, "a temporary file was left in the cache");
    }
}
