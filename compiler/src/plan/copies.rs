//! Copy insertion: a transfer or relayout only where a value's producer and a consumer disagree, at most one per
//! value and destination space. Graph inputs are the caller's memory, on the host, in the caller's layout (or on
//! a device, where the caller says they live: `resident.rs`);
//! outputs stay where they were produced (lazy), and move only when the caller reads their bytes.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use stowage_runtime::MemoryKind;

use crate::ir::{Graph, NodeId, ValueDef, ValueId};

use super::layout::InputLayout;
use super::placement::Placed;
use super::target::Backend;
use super::PlanOptions;

/// What a copy does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CopyKind {
    /// Host to a device's memory.
    Upload,
    /// A device's memory to the host.
    Download,
    /// Within one space, into the layout a kernel reads.
    Relayout,
}

impl fmt::Display for CopyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CopyKind::Upload => "upload",
            CopyKind::Download => "download",
            CopyKind::Relayout => "relayout",
        })
    }
}

/// How often a copy runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum When {
    /// Once, when the program is made (constants to a device).
    Setup,
    /// Every run.
    EveryRun,
    /// The first run only (a state input: later runs use the fed-back output where it is).
    FirstRun,
    /// When the caller reads the output's bytes, once.
    WhenRead,
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            When::Setup => "once, at setup",
            When::EveryRun => "every run",
            When::FirstRun => "first run only",
            When::WhenRead => "when read",
        })
    }
}

/// One copy the plan performs.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlannedCopy {
    /// The value's name.
    pub value: String,
    /// The value.
    #[serde(with = "super::serial::id")]
    pub id: ValueId,
    /// What the copy does.
    pub kind: CopyKind,
    /// Source memory space.
    pub from: String,
    /// Destination memory space.
    pub to: String,
    /// Bytes moved.
    pub bytes: usize,
    /// Why it is needed.
    pub reason: String,
    /// How often.
    pub when: When,
}

impl fmt::Display for PlannedCopy {
    /// One line: `upload 'x' host -> opencl:0, 602112 bytes, every run: REASON`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} '{}' {} -> {}, {} bytes, {}: {}",
            self.kind, self.value, self.from, self.to, self.bytes, self.when, self.reason
        )
    }
}

/// How a graph input reaches the kernels of one space.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum InputAccess {
    /// The caller's memory is read in place, in its layout.
    InPlace,
    /// One copy (a relayout on the host, an upload to a device) that every kernel of the space reads.
    Copied,
    /// One upload of the caller's bytes as they are, padding and all (`stowage_runtime::device_input_as_held`):
    /// the device's memory holds the caller's layout and every kernel of the space reads it, compiled for it.
    Held,
}

/// The copies of a placed graph, and how each input reaches each space.
pub struct Copies {
    /// Every copy, in the order they first happen.
    pub copies: Vec<PlannedCopy>,
    /// Per graph input and space that reads it: in place or through its one copy.
    pub input_access: BTreeMap<(String, String), InputAccess>,
}

/// The copies made so far, as sets, so that asking about them is not a walk of every copy.
#[derive(Default)]
struct Seen {
    /// Values and the spaces copies took them to, but for reads of outputs.
    arrived: HashSet<(ValueId, String)>,
    /// Values downloaded to the host every run.
    downloaded: HashSet<ValueId>,
}

impl Seen {
    fn push(&mut self, copies: &mut Vec<PlannedCopy>, c: PlannedCopy) {
        if c.when != When::WhenRead {
            self.arrived.insert((c.id, c.to.clone()));
        }
        if c.to == "host" && c.when == When::EveryRun {
            self.downloaded.insert(c.id);
        }
        copies.push(c);
    }

    fn arrived(&self, v: ValueId, space: &str) -> bool {
        self.arrived.contains(&(v, space.to_string()))
    }
}

/// Inserts the copies for `placed`.
pub fn insert(graph: &Graph, targets: &[&dyn Backend], placed: &[Placed], options: &PlanOptions) -> Copies {
    let target_of: BTreeMap<NodeId, usize> = placed.iter().map(|p| (p.node, p.target)).collect();
    let spec = |i: usize| targets[i].spec();
    let mut out = Copies { copies: Vec::new(), input_access: BTreeMap::new() };
    // Consumers of each value, grouped by space, in order.
    let mut consumers: BTreeMap<ValueId, Vec<(NodeId, usize, usize)>> = BTreeMap::new();
    for p in placed {
        for (k, v) in graph.node(p.node).inputs.iter().enumerate() {
            if let Some(v) = v {
                consumers.entry(*v).or_default().push((p.node, k, p.target));
            }
        }
    }
    let states: BTreeMap<&str, &str> = options.states.iter().map(|(o, i)| (i.as_str(), o.as_str())).collect();
    let mut setup_done: HashSet<(ValueId, String)> = HashSet::new();
    let mut seen = Seen::default();
    for p in placed {
        for v in graph.node(p.node).inputs.iter().flatten() {
            let data = graph.value(*v);
            let here = spec(p.target);
            let bytes = data.ty.byte_len().unwrap_or(0);
            // A download lands on the host; everything else lands where this node runs.
            let copy = |kind, from: &str, reason: String, when| PlannedCopy {
                value: data.name.clone(),
                id: *v,
                kind,
                from: from.to_string(),
                to: if kind == CopyKind::Download { "host".to_string() } else { here.space.clone() },
                bytes,
                reason,
                when,
            };
            match &data.def {
                ValueDef::Const(t) => {
                    if !here.is_host() && setup_done.insert((*v, here.space.clone())) {
                        let m = &here.memory;
                        let import = m.import_alignment.filter(|_| m.kind == MemoryKind::Unified);
                        let address = t.storage().host_bytes().map(|b| b.as_ptr() as usize + t.layout().offset());
                        let whole = !t.is_empty() && t.is_row_major() && t.is_whole_storage();
                        // Constants are laid out at `CONST_ALIGNMENT` (built code's image promises no more), so a
                        // device that imports at a larger alignment is planned an upload, wherever they happen to be.
                        let laid_out = crate::ir::serial::CONST_ALIGNMENT;
                        let reason = match (import, address) {
                            (Some(a), _) if whole && a > laid_out => format!(
                                "a constant, uploaded once when the program is made: {} imports at {a}-byte \
                                 alignment, constants are laid out at {laid_out}",
                                here.space
                            ),
                            // A unified device reads the constant where it is (in built code: in the image).
                            (Some(a), Some(at)) if whole && at.is_multiple_of(a) => continue,
                            (Some(a), Some(at)) if whole => format!(
                                "a constant {} bytes past {}'s {a}-byte import alignment, uploaded once when the \
                                 program is made",
                                at % a,
                                here.space
                            ),
                            _ => "a constant, uploaded once when the program is made".to_string(),
                        };
                        seen.push(&mut out.copies, copy(CopyKind::Upload, "host", reason, When::Setup));
                    }
                }
                ValueDef::Input(_) => {
                    let key = (data.name.clone(), here.space.clone());
                    if out.input_access.contains_key(&key) {
                        continue;
                    }
                    let layout = options
                        .input_layouts
                        .get(&data.name)
                        .cloned()
                        .unwrap_or_else(|| InputLayout::packed(data.ty.rank()));
                    if let Some(home) = options.input_devices.get(&data.name) {
                        let home = targets.iter().map(|t| t.spec()).find(|s| s.space == *home);
                        // Checked against the targets before planning (`check_options`).
                        let Some(home) = home else { continue };
                        let made = |kind, from: &str, to: &str, reason| PlannedCopy {
                            from: from.to_string(),
                            to: to.to_string(),
                            ..copy(kind, from, reason, When::EveryRun)
                        };
                        let downloaded = seen.arrived(*v, "host");
                        let (access, copies) = super::resident::access(home, here, &layout, downloaded, &made);
                        for c in copies {
                            seen.push(&mut out.copies, c);
                        }
                        out.input_access.insert(key, access);
                        continue;
                    }
                    let state = states.get(data.name.as_str());
                    let when = if state.is_some() { When::FirstRun } else { When::EveryRun };
                    let fed = |reason: String| match state {
                        Some(o) => format!("{reason}; later runs use output '{o}' where it is"),
                        None => reason,
                    };
                    let (access, c) = if here.is_host() {
                        // Every host kernel of this space must read the caller's layout, or all read one relayout.
                        let refuser = consumers[v]
                            .iter()
                            .filter(|c| spec(c.2).space == here.space)
                            .find(|c| !layout.read_in_place_by(&targets[c.2].accepts(graph, c.0, c.1)));
                        match refuser {
                            // A fed-back state arrives packed from the second run on: kernels compiled for the
                            // caller's strides could not read it, so a state in another layout is relaid.
                            None if state.is_some() && !layout.is_packed() => {
                                let reason = format!(
                                    "the caller's {} for a state input, which later runs feed back packed",
                                    layout.describe()
                                );
                                (InputAccess::Copied, Some(copy(CopyKind::Relayout, "host", reason, When::FirstRun)))
                            }
                            None => (InputAccess::InPlace, None),
                            Some(&(n, _, _)) => {
                                let node = graph.node(n);
                                let reason = format!(
                                    "the caller's {} where {} ({}) reads packed row-major",
                                    layout.describe(),
                                    node.name,
                                    node.op.name()
                                );
                                (InputAccess::Copied, Some(copy(CopyKind::Relayout, "host", reason, When::EveryRun)))
                            }
                        }
                    } else {
                        let m = &here.memory;
                        let import = m.import_alignment.filter(|_| m.kind == MemoryKind::Unified);
                        // The device's kernels that read the input, asked as the host's are: one that does not read
                        // the caller's layout in place.
                        let refuser = consumers[v]
                            .iter()
                            .filter(|c| spec(c.2).space == here.space)
                            .find(|c| !layout.read_in_place_by(&targets[c.2].accepts(graph, c.0, c.1)));
                        let pitch_ok = layout.row_pitch.is_none_or(|p| p.is_multiple_of(m.row_pitch_alignment.max(1)));
                        let held = pitch_ok && layout.kind().is_some_and(|k| m.holds(k));
                        // Checked in the order the import checks them: alignment, whole buffer, packed rows (or a
                        // layout the device's memory holds and every kernel reading it takes).
                        match import {
                            Some(a) if !layout.alignment.is_multiple_of(a) => {
                                let reason = format!(
                                    "{} imports host memory in place at {a}-byte alignment; the input is {}-byte aligned",
                                    here.space, layout.alignment
                                );
                                (InputAccess::Copied, Some(copy(CopyKind::Upload, "host", fed(reason), when)))
                            }
                            Some(_) if layout.view => {
                                let reason = format!(
                                    "{} imports whole host buffers only; the input is part of a larger one",
                                    here.space
                                );
                                (InputAccess::Copied, Some(copy(CopyKind::Upload, "host", fed(reason), when)))
                            }
                            Some(_) if layout.is_packed() => (InputAccess::InPlace, None),
                            Some(_) if held && refuser.is_none() && state.is_none() => (InputAccess::InPlace, None),
                            Some(_) => {
                                let reason = match refuser {
                                    _ if !held => format!(
                                        "{} imports packed row-major host memory only; the caller's is {}",
                                        here.space,
                                        layout.describe()
                                    ),
                                    Some(&(n, _, _)) => format!(
                                        "the caller's {} where {} ({}) reads packed row-major",
                                        layout.describe(),
                                        graph.node(n).name,
                                        graph.node(n).op.name()
                                    ),
                                    None => format!(
                                        "the caller's {} for a state input, which later runs feed back packed",
                                        layout.describe()
                                    ),
                                };
                                (InputAccess::Copied, Some(copy(CopyKind::Upload, "host", fed(reason), when)))
                            }
                            None if held && !layout.is_packed() && refuser.is_none() && state.is_none() => {
                                let reason = format!(
                                    "{} is discrete memory: one upload{} of the caller's {} as it is: the device holds \
                                     it and its kernels read it",
                                    here.space,
                                    if here.memory.staged { " through pinned staging" } else { "" },
                                    layout.describe()
                                );
                                let ty = &data.ty;
                                let strides = layout.strides(ty.dt, &ty.shape);
                                let span =
                                    ty.shape.iter().zip(&strides).map(|(d, s)| d.saturating_sub(1) * s).sum::<usize>();
                                let bytes = if ty.shape.contains(&0) { 0 } else { (span + 1) * ty.dt.size_of() };
                                let up = PlannedCopy { bytes, ..copy(CopyKind::Upload, "host", reason, when) };
                                (InputAccess::Held, Some(up))
                            }
                            None => {
                                let mut reason = if here.memory.staged {
                                    format!("{} is discrete memory: one upload through pinned staging", here.space)
                                } else {
                                    format!("{} is discrete memory: one upload", here.space)
                                };
                                if !layout.is_packed() && m.packs_on_upload {
                                    reason
                                        .push_str(&format!(", packed as it goes (the caller's {})", layout.describe()));
                                }
                                (InputAccess::Copied, Some(copy(CopyKind::Upload, "host", fed(reason), when)))
                            }
                        }
                    };
                    // A backend that cannot pack as it uploads gets the caller's strided tensor packed on the
                    // host first: a relayout, then the upload (`stowage_runtime::device_input`).
                    let packed_first = !here.is_host()
                        && !layout.is_packed()
                        && !here.memory.packs_on_upload
                        && access == InputAccess::Copied;
                    if let (true, Some(up)) = (packed_first, &c) {
                        let reason = format!(
                            "the caller's {} packed row-major on the host for its upload to {} (its storage has no \
                             `upload_with`)",
                            layout.describe(),
                            here.space
                        );
                        let relayout = copy(CopyKind::Relayout, "host", reason, up.when);
                        out.copies.push(PlannedCopy { to: "host".into(), ..relayout });
                    }
                    out.input_access.insert(key, access);
                    if let Some(c) = c {
                        seen.push(&mut out.copies, c);
                    }
                }
                ValueDef::Node(producer, _) => {
                    let from = spec(target_of[producer]);
                    // Already here: made here, or moved here by an earlier reader (a download serves every
                    // host reader: the lazy tensor downloads once).
                    if from.space == here.space || seen.arrived(*v, &here.space) {
                        continue;
                    }
                    let node = graph.node(p.node);
                    let read_by = format!(
                        "computed on {}, read by {} ({}) on {}",
                        from.name,
                        node.name,
                        node.op.name(),
                        here.name
                    );
                    if here.is_host() {
                        if from.memory.kind == MemoryKind::Device {
                            seen.push(&mut out.copies, copy(CopyKind::Download, &from.space, read_by, When::EveryRun));
                        }
                        // Unified memory is read by the host in place.
                    } else {
                        let m = &here.memory;
                        let import = m.import_alignment.filter(|_| m.kind == MemoryKind::Unified);
                        let host_alignment = if from.is_host() { from.memory.alignment } else { 0 };
                        let reason = match import {
                            Some(a) if host_alignment > 0 && host_alignment.is_multiple_of(a) => continue,
                            Some(a) if from.is_host() => format!(
                                "{read_by}: {}'s buffers are {host_alignment}-byte aligned, {} imports at {a}",
                                from.name, here.space
                            ),
                            _ => read_by,
                        };
                        if !from.is_host() && from.memory.kind == MemoryKind::Device {
                            let reason = format!("{reason}, through the host");
                            if !seen.arrived(*v, "host") {
                                let down = copy(CopyKind::Download, &from.space, reason.clone(), When::EveryRun);
                                seen.push(&mut out.copies, down);
                            }
                            seen.push(&mut out.copies, copy(CopyKind::Upload, "host", reason, When::EveryRun));
                        } else {
                            seen.push(&mut out.copies, copy(CopyKind::Upload, "host", reason, When::EveryRun));
                        }
                    }
                }
            }
        }
    }
    // Outputs stay where they were made; the caller reading bytes of one on discrete memory costs one download.
    if options.read_outputs {
        for o in graph.outputs() {
            let space = match graph.value(o.value).def {
                ValueDef::Node(n, _) => spec(target_of[&n]),
                _ => continue,
            };
            // A value some host kernel reads is downloaded every run already; reading it is free.
            let downloaded = seen.downloaded.contains(&o.value);
            if space.memory.kind == MemoryKind::Device && !downloaded {
                // Named as the value, as the ledger names what it downloads (an expansion's last value keeps its
                // own name under the graph output's).
                out.copies.push(PlannedCopy {
                    value: graph.value(o.value).name.clone(),
                    id: o.value,
                    kind: CopyKind::Download,
                    from: space.space.clone(),
                    to: "host".into(),
                    bytes: graph.ty(o.value).byte_len().unwrap_or(0),
                    reason: "an output the caller reads, downloaded once when first read".into(),
                    when: When::WhenRead,
                });
            }
        }
    }
    out
}
