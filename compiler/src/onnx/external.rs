//! A tensor's external data: a file in the model's folder, of which it reads the bytes the tensor needs.
//!
//! The location must be a relative path without `..`. It is resolved (every symlink followed) and must still lie
//! inside the model's folder (resolved too): a symlink, or a linked folder on the way, that leads out of it is
//! refused. What it resolves to is checked, before anything opens it, to be a regular file: a directory, FIFO
//! (which would block a reader), device (`/dev/zero` has no end) or socket is refused by name. The file is then
//! opened without following a symlink and without blocking, checked to be the file examined, and only `length`
//! bytes at `offset` are read, once the file is known to hold them: a 6 GB file of which 16 bytes are used costs
//! 16 bytes of memory.

use std::fs::{File, Metadata};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use super::proto::TensorProto;

/// External data that cannot be read. Each error names the file as the location gives it (joined to the model's
/// folder); the caller adds the tensor's name.
#[derive(Debug, thiserror::Error)]
pub enum ExternalDataError {
    /// No `location` entry.
    #[error("external data without a location")]
    NoLocation,
    /// An absolute location, or one with `..`.
    #[error("external data location '{0}' must be a relative path inside the model's folder")]
    NotRelative(String),
    /// The model came from memory: there is no folder to look in.
    #[error("external data, but the model was not loaded from a file")]
    NoFolder,
    /// An `offset` or `length` that is not a number.
    #[error("external data {key} '{value}' is not a number")]
    NotANumber {
        /// `offset` or `length`.
        key: &'static str,
        /// The value given.
        value: String,
    },
    /// A `length` other than the tensor's size.
    #[error("external data file {}: length {length}, but the tensor needs {needed} bytes", path.display())]
    Length {
        /// The file.
        path: PathBuf,
        /// The `length` entry.
        length: u64,
        /// The bytes the tensor's type and shape need.
        needed: u64,
    },
    /// The file, or the model's folder, cannot be resolved, examined, opened or read.
    #[error("external data file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// It resolves to somewhere outside the model's folder.
    #[error(
        "external data file {}: it resolves to {}, outside the model's folder {}",
        path.display(), resolved.display(), folder.display()
    )]
    Outside {
        /// The file.
        path: PathBuf,
        /// Where it leads, every symlink followed.
        resolved: PathBuf,
        /// The model's folder, resolved.
        folder: PathBuf,
    },
    /// It is a directory, FIFO, device or socket.
    #[error("external data file {}: it is a {kind}, not a regular file", path.display())]
    NotAFile {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// The file changed between being examined and being opened.
    #[error("external data file {}: it was replaced while it was being opened", path.display())]
    Replaced {
        /// The file.
        path: PathBuf,
    },
    /// The file is shorter than `offset + length`.
    #[error("external data file {} has {size} bytes, needs {length} from offset {offset}", path.display())]
    Short {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The `offset` entry.
        offset: u64,
        /// The bytes read.
        length: u64,
    },
    /// Memory for the bytes could not be had.
    #[error("external data file {}: cannot allocate {length} bytes for it", path.display())]
    Allocation {
        /// The file.
        path: PathBuf,
        /// The bytes asked for.
        length: u64,
    },
}

/// The `needed` bytes of `t`'s external data, looked up in `dir` (the model's folder).
pub fn read(t: &TensorProto, dir: Option<&Path>, needed: usize) -> Result<Vec<u8>, ExternalDataError> {
    use ExternalDataError as E;
    let entry = |key: &str| t.external_data.iter().find(|e| e.key() == key).map(|e| e.value().to_string());
    let location = entry("location").ok_or(E::NoLocation)?;
    let rel = Path::new(&location);
    if rel.is_absolute() || rel.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(E::NotRelative(location));
    }
    let dir = dir.ok_or(E::NoFolder)?;
    let path = dir.join(rel);
    let number = |key: &'static str| -> Result<Option<u64>, ExternalDataError> {
        entry(key).map(|value| value.parse::<u64>().map_err(|_| E::NotANumber { key, value })).transpose()
    };
    let offset = number("offset")?.unwrap_or(0);
    let needed = needed as u64;
    let length = number("length")?.unwrap_or(needed);
    if length != needed {
        return Err(E::Length { path, length, needed });
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| E::Io { path, source }
    };
    let resolved = path.canonicalize().map_err(io(&path))?;
    // `metadata`, not `open`: examining a FIFO does not block.
    let meta = std::fs::metadata(&resolved).map_err(io(&path))?;
    if let Some(kind) = not_regular(&meta) {
        return Err(E::NotAFile { path, kind });
    }
    let folder = dir.canonicalize().map_err(io(dir))?;
    if !resolved.starts_with(&folder) {
        return Err(E::Outside { path, resolved, folder });
    }
    let mut file = open_no_follow(&resolved).map_err(io(&path))?;
    let opened = file.metadata().map_err(io(&path))?;
    if !same_file(&meta, &opened) {
        return Err(E::Replaced { path });
    }
    let size = opened.len();
    if offset.checked_add(length).is_none_or(|end| end > size) {
        return Err(E::Short { path, size, offset, length });
    }
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(needed as usize).map_err(|_| E::Allocation { path: path.clone(), length })?;
    bytes.resize(needed as usize, 0);
    file.seek(SeekFrom::Start(offset)).and_then(|_| file.read_exact(&mut bytes)).map_err(io(&path))?;
    Ok(bytes)
}

/// What a file that is not a regular one is, by name.
fn not_regular(meta: &Metadata) -> Option<&'static str> {
    let ty = meta.file_type();
    if ty.is_file() {
        return None;
    }
    if ty.is_dir() {
        return Some("directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ty.is_fifo() {
            return Some("FIFO");
        }
        if ty.is_char_device() {
            return Some("character device");
        }
        if ty.is_block_device() {
            return Some("block device");
        }
        if ty.is_socket() {
            return Some("socket");
        }
    }
    Some("special file")
}

/// Opens `path` for reading, refusing a symlink as its last component and never blocking (on a FIFO swapped in).
fn open_no_follow(path: &Path) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    options.open(path)
}

/// Whether two examinations are of one file.
fn same_file(a: &Metadata, b: &Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino() && b.file_type().is_file()
    }
    #[cfg(not(unix))]
    {
        let _ = a;
        b.file_type().is_file()
    }
}
