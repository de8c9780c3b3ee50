//! Files a command writes (`stowage run`'s outputs and report, `stowage plan -o`), staged and committed together.
//!
//! Each file is first written to a temporary file beside its final one, created by the `tempfile` crate: a random
//! name opened with `O_EXCL` (never a predictable name, never through a symlink someone planted). [`Staging::commit`]
//! then renames them into place while it holds an exclusive advisory lock (`flock`) on each folder it writes into,
//! so the commits of runs into one folder do not interleave: a run's files are all replaced, or, when one cannot
//! be, none is and every file that existed before is as it was (the old ones are kept under a hard link, or a copy,
//! until the commit is done). Renames replace a symlink at a final path; they never write through one.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tempfile::{NamedTempFile, TempPath};

/// How long a commit waits for another process's lock on a folder before giving up.
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// A file written under a temporary name, waiting to be renamed to `path`.
struct Staged {
    tmp: NamedTempFile,
    path: PathBuf,
    /// What the file is, for errors.
    what: String,
}

/// Files written under temporary names beside their final ones, renamed into place together by [`Staging::commit`].
/// Dropped before that, it removes its temporary files and the folders it created.
#[derive(Default)]
pub struct Staging {
    files: Vec<Staged>,
    /// Folders created, outermost first.
    created: Vec<PathBuf>,
}

/// The folder `path` is in (`.` for a bare file name).
fn folder(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// A temporary file in `dir` named `.{name}.XXXXXX.partial`, created with the permissions a plain `File::create`
/// gives (`0o666` less the umask), not `tempfile`'s `0o600`.
pub(crate) fn temporary(dir: &Path, name: &str) -> io::Result<NamedTempFile> {
    let mut builder = tempfile::Builder::new();
    let prefix = format!(".{name}.");
    builder.prefix(&prefix).suffix(".partial");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    builder.tempfile_in(dir)
}

impl Staging {
    /// Creates `dir` and its missing parents, remembering which it created.
    pub fn create_dir(&mut self, dir: &Path) -> io::Result<()> {
        let mut missing = Vec::new();
        let mut level = Some(dir);
        while let Some(d) = level.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            missing.push(d.to_path_buf());
            level = d.parent();
        }
        self.created.extend(missing.into_iter().rev());
        std::fs::create_dir_all(dir)
    }

    /// Writes `bytes` for `path` under a temporary name; `what` names the file in errors. A path staged twice is
    /// refused.
    pub fn stage(&mut self, path: &Path, what: String, bytes: &[u8]) -> Result<(), String> {
        let name = path.file_name().ok_or_else(|| format!("{what}: not a file name"))?;
        if let Some(other) = self.files.iter().find(|f| same_file_path(&f.path, path)) {
            return Err(format!("{what}: {} is also where {} goes", path.display(), other.path.display()));
        }
        let write = || {
            let mut tmp = temporary(folder(path), &name.to_string_lossy())?;
            tmp.write_all(bytes)?;
            Ok::<_, io::Error>(tmp)
        };
        let tmp = write().map_err(|e| format!("{what}: {e}"))?;
        self.files.push(Staged { tmp, path: path.to_path_buf(), what });
        Ok(())
    }

    /// Renames every file into place under the folders' locks; when one cannot be, those already renamed are put
    /// back as they were (the file that was there before, or none).
    pub fn commit(mut self) -> Result<(), String> {
        if let Some(f) = self.files.iter().find(|f| f.path.is_dir()) {
            return Err(format!("{}: {} is a directory", f.what, f.path.display()));
        }
        let folders: Vec<&Path> = self.files.iter().map(|f| folder(&f.path)).collect();
        let _locks = lock_folders(&folders)?;
        // What each final path held: kept aside until every file is in place.
        let mut kept: Vec<Option<TempPath>> = Vec::new();
        for f in &self.files {
            kept.push(keep_aside(&f.path).map_err(|e| format!("{}: cannot keep the old file: {e}", f.what))?);
        }
        let mut done: Vec<PathBuf> = Vec::new();
        for f in std::mem::take(&mut self.files) {
            // A failed rename hands the temporary file back, and dropping it removes it.
            if let Err(e) = f.tmp.persist(&f.path) {
                for (path, old) in done.iter().zip(kept) {
                    match old {
                        Some(old) => {
                            let _ = old.persist(path);
                        }
                        None => {
                            let _ = std::fs::remove_file(path);
                        }
                    }
                }
                return Err(format!("{}: {}", f.what, e.error));
            }
            done.push(f.path);
        }
        // Every file is in place: the old ones go with `kept`.
        drop(kept);
        self.created.clear();
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // The temporary files remove themselves; then the folders they were in, if this created them.
        self.files.clear();
        for dir in self.created.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Two paths to one file name in one folder (the folders compared as they resolve, where they exist).
fn same_file_path(a: &Path, b: &Path) -> bool {
    a.file_name() == b.file_name() && same_folder(folder(a), folder(b))
}

/// Whether `a` and `b` are one folder: compared resolved where both exist, else as absolute paths.
pub(crate) fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
    }
}

/// A second name for what is at `path` (a hard link; a copy of a regular file, or a symlink's like, where hard
/// links cannot be made), removed when dropped; `None` when there is nothing there.
fn keep_aside(path: &Path) -> io::Result<Option<TempPath>> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut builder = tempfile::Builder::new();
    let prefix = format!(".{name}.");
    builder.prefix(&prefix).suffix(".old");
    let dir = folder(path);
    let kept = match builder.make_in(dir, |p| std::fs::hard_link(path, p)) {
        Ok(kept) => kept.into_temp_path(),
        Err(_) if meta.is_file() => {
            let mut copy = builder.tempfile_in(dir)?;
            io::copy(&mut File::open(path)?, copy.as_file_mut())?;
            copy.into_temp_path()
        }
        #[cfg(unix)]
        Err(_) if meta.file_type().is_symlink() => {
            let target = std::fs::read_link(path)?;
            builder.make_in(dir, |p| std::os::unix::fs::symlink(&target, p))?.into_temp_path()
        }
        Err(e) => return Err(e),
    };
    Ok(Some(kept))
}

/// Exclusive advisory locks on `folders`, each taken once, in one order (so two commits never wait on each
/// other), held until the files are dropped. A folder whose file system has no locks is committed without one.
fn lock_folders(folders: &[&Path]) -> Result<Vec<File>, String> {
    let mut resolved: Vec<PathBuf> =
        folders.iter().map(|f| f.canonicalize().unwrap_or_else(|_| f.to_path_buf())).collect();
    resolved.sort();
    resolved.dedup();
    let mut locks = Vec::new();
    for dir in resolved {
        let file = File::open(&dir).map_err(|e| format!("{}: cannot lock the folder: {e}", dir.display()))?;
        let start = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(format!(
                        "{}: another process has held the folder's lock for {} s",
                        dir.display(),
                        LOCK_WAIT.as_secs()
                    ));
                }
                Err(std::fs::TryLockError::Error(e)) if e.kind() == io::ErrorKind::Unsupported => break,
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(format!("{}: cannot lock the folder: {e}", dir.display()));
                }
            }
        }
        locks.push(file);
    }
    Ok(locks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_symlink_planted_at_the_old_temporary_name_is_not_followed() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let (dir, outside) = (tmp.path().join("out"), tmp.path().join("precious"));
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(&outside, b"precious").expect("writes");
        // The name this process's staging of output_0.pb used to have.
        let old = dir.join(format!(".output_0.pb.{}.partial", std::process::id()));
        std::os::unix::fs::symlink(&outside, &old).expect("symlink");
        let mut staging = Staging::default();
        staging.stage(&dir.join("output_0.pb"), "output 0".into(), b"new").expect("stages");
        staging.commit().expect("commits");
        assert_eq!(std::fs::read(&outside).expect("reads"), b"precious");
        assert_eq!(std::fs::read(dir.join("output_0.pb")).expect("reads"), b"new");
        assert!(std::fs::symlink_metadata(&old).expect("still there").file_type().is_symlink());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("lists")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .collect();
        names.sort();
        assert_eq!(names, [old.file_name().unwrap().to_str().unwrap(), "output_0.pb"]);
    }

    #[test]
    fn a_failed_commit_puts_back_the_files_that_were_there() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path();
        std::fs::write(dir.join("output_0.pb"), b"old 0").expect("writes");
        let mut staging = Staging::default();
        staging.stage(&dir.join("output_0.pb"), "output 0".into(), b"new 0").expect("stages");
        staging.stage(&dir.join("output_1.pb"), "output 1".into(), b"new 1").expect("stages");
        staging.stage(&dir.join("output_2.pb"), "output 2".into(), b"new 2").expect("stages");
        // The third file's temporary name is taken away: its rename fails after two have been made.
        std::fs::remove_file(staging.files[2].tmp.path()).expect("removes");
        let err = staging.commit().unwrap_err();
        assert!(err.starts_with("output 2: "), "{err}");
        assert_eq!(std::fs::read(dir.join("output_0.pb")).expect("the old output is back"), b"old 0");
        let names: Vec<_> = std::fs::read_dir(dir).expect("lists").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, ["output_0.pb"], "the new output_1.pb and every temporary file are gone");
    }

    #[test]
    fn one_path_staged_twice_is_refused() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let path = tmp.path().join("output_0.pb");
        let mut staging = Staging::default();
        staging.stage(&path, "output 0".into(), b"0").expect("stages");
        let other = tmp.path().join(".").join("output_0.pb");
        let err = staging.stage(&other, "report".into(), b"{}").unwrap_err();
        assert!(err.starts_with("report: ") && err.contains("is also where"), "{err}");
    }
}
