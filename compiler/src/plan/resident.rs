//! Inputs that already live on a device (`--input-device NAME=TARGET`, [`super::PlanOptions::input_device`]): a
//! caller's OpenCL buffer, a frame a decoder left in GPU memory. The copy pass asks here, instead of the host
//! rules, how each space that reads such an input reaches it. The rules:
//! 1. **Where it lives, it is read in place** when packed row-major: no copy, the plan says so.
//! 2. **In another layout where it lives** (a caller's padded rows, `--input-layout`), it costs exactly one
//!    relayout there, on the device, every run: kernels read packed rows.
//! 3. **A host reader** reads one download per run (shared with another device's reader), whatever the device's
//!    memory: a caller's buffer is device memory even where the device shares the host's, and `stowage run` puts
//!    a file's tensor in such memory too; padded rows are then relaid on the host.
//! 4. **Another device** reads it through the host: a download (shared with host readers) and an upload.
//! 5. **Not a state input**: a state (`--state OUT=IN`) is fed back where its output is made, which the plan
//!    decides; declaring where it lives as well is refused ([`super::PlanError::BadOption`]).

use super::copies::{CopyKind, InputAccess, PlannedCopy};
use super::layout::InputLayout;
use super::target::TargetSpec;

/// How the kernels of `here` reach an input that lives in `home`, laid out as `layout`: the access and the
/// copies, in order (each made by `copy(kind, from, to, reason)`). `downloaded` is true when an earlier reader's
/// download already brought it to the host.
pub(super) fn access(
    home: &TargetSpec,
    here: &TargetSpec,
    layout: &InputLayout,
    downloaded: bool,
    copy: &dyn Fn(CopyKind, &str, &str, String) -> PlannedCopy,
) -> (InputAccess, Vec<PlannedCopy>) {
    let lives = format!("the input lives on {} (--input-device)", home.space);
    // Rule 1 and 2.
    if here.space == home.space {
        if layout.is_packed() {
            return (InputAccess::InPlace, Vec::new());
        }
        let reason = format!("{lives} as {}; its kernels read packed rows: relaid on the device", layout.describe());
        return (InputAccess::Copied, vec![copy(CopyKind::Relayout, &home.space, &home.space, reason)]);
    }
    // Rule 3.
    if here.is_host() {
        let mut copies = Vec::new();
        if !downloaded {
            let reason = format!("{lives}, read on the host");
            copies.push(copy(CopyKind::Download, &home.space, "host", reason));
        }
        if !layout.is_packed() {
            let reason = format!("{lives} as {}, read packed on the host", layout.describe());
            copies.push(copy(CopyKind::Relayout, "host", "host", reason));
        }
        return (InputAccess::Copied, copies);
    }
    // Rule 4.
    let reason = format!("{lives}, read by {} through the host", here.space);
    let mut copies = Vec::new();
    if !downloaded {
        copies.push(copy(CopyKind::Download, &home.space, "host", reason.clone()));
    }
    copies.push(copy(CopyKind::Upload, "host", &here.space, reason));
    (InputAccess::Copied, copies)
}
