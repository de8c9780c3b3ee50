//! A run of a [`ClProgram`]: its inputs taken or uploaded, every launch bound to the buffers it runs on, then
//! enqueued kernel by kernel or replayed from a recorded command buffer (`replay.rs`), and the outputs handed out
//! lazily.

use std::sync::Arc;

use opencl3::event::Event;
use opencl3::memory::ClMem as _;
use stowage_runtime::{DatumType, DeviceBuffer, Ledger, LedgerTag, MemorySpace, MoveKind, Tensor, Transferred};

use crate::buffer::ClBuffer;
use crate::error::{ClError, Result};
use crate::exec::{live_bytes, ArgRef, ClProgram, Step, StepKind};
use crate::replay::{Bound, Recording, Replay};

impl ClProgram {
    /// Runs on `inputs` (in [`ClProgram::inputs`] order). Transfers are recorded in `ledger`; outputs are lazy.
    pub fn run(&self, inputs: Vec<Tensor<'static>>, ledger: &Ledger) -> Result<Vec<Tensor<'static>>> {
        let _running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let bad = |name: &str, m: String| ClError::Input { input: name.into(), message: m };
        if inputs.len() != self.inputs.len() {
            let name = self.inputs.get(inputs.len()).map_or("(extra)", |b| b.name.as_str());
            return Err(bad(
                name,
                format!("the model takes {} inputs, {} were given", self.inputs.len(), inputs.len()),
            ));
        }
        self.reclaim();
        self.pool_in_order();
        let mut slots: Vec<Option<ClBuffer>> = vec![None; self.types.len()];
        for (s, b) in &self.consts {
            slots[*s] = Some(b.clone());
        }
        for (b, t) in self.inputs.iter().zip(&inputs) {
            if t.dt() != b.dt || t.shape() != b.shape.as_slice() {
                return Err(bad(&b.name, format!("expected {}{:?}, got {}{:?}", b.dt, b.shape, t.dt(), t.shape())));
            }
            let t = t.clone().with_name(b.name.clone());
            let transfer =
                |e: stowage_runtime::RuntimeError| ClError::Transfer { value: b.name.clone(), message: e.to_string() };
            if let Some(held) = ClBuffer::of(&t) {
                if let Some(buffer) = self.held_input(held, &t, ledger)? {
                    slots[b.slot] = Some(buffer);
                    continue;
                }
            }
            let buffer = match ClBuffer::import(&self.target, &t)? {
                Ok(imported) => imported,
                // A device output handed back: the runtime's rule (used as is where it is).
                Err(_) if t.device_buffer::<ClBuffer>().is_some() => {
                    ClBuffer::from_tensor(&t, &self.target, ledger).map_err(transfer)?
                }
                // A strided host tensor (a caller's padded rows): packed as it is uploaded, one copy.
                Err(_) if !t.is_row_major() => {
                    let bytes = t.len() * t.dt().size_of();
                    let up = ClBuffer::upload_packed(&self.target, &t)?;
                    let tag = LedgerTag::new(ledger, b.name.as_str());
                    tag.record(MoveKind::Upload, &MemorySpace::HOST, self.target.space(), bytes, || {
                        format!("the caller's {} input, packed as it is uploaded", t.layout_kind()).into()
                    });
                    up
                }
                Err(why) => {
                    let bytes = t.as_bytes().map_err(transfer)?;
                    let up = self.upload(t.dt(), t.shape(), bytes).map_err(transfer)?;
                    if up.copied {
                        let tag = LedgerTag::new(ledger, b.name.as_str());
                        let space = self.target.space();
                        tag.record(MoveKind::Upload, &MemorySpace::HOST, space, bytes.len(), || why.into());
                    }
                    up.value
                }
            };
            slots[b.slot] = Some(buffer);
        }
        // Constants, inputs and outputs (handed to the caller) are not intermediates: the plan keeps them out of
        // its arenas too, with the values it hands to another space. Values at their places in the arena count
        // as its high-water mark; any other intermediate counts while it is alive.
        // Without a plan, every buffer alive but theirs is counted (aliases share one), each step.
        let mut fixed: Vec<bool> = vec![false; self.types.len()];
        if self.memory.is_none() {
            let kept =
                self.consts.iter().map(|(s, _)| *s).chain(self.inputs.iter().chain(&self.outputs).map(|b| b.slot));
            for s in kept {
                fixed[s] = true;
            }
        }
        let (mut peak, mut high_water) = (0, 0);
        // Bound first, enqueued after (`replay.rs`, rule 2): buffers dropped on the way stay alive until then.
        let (mut bound, mut kept, mut written) = (Vec::new(), Vec::new(), vec![false; self.types.len()]);
        for (i, step) in self.steps.iter().enumerate() {
            self.bind_step(i, step, &mut slots, &mut bound, &mut written)?;
            if let (Some(m), StepKind::Launches { outs, .. }) = (&self.memory, &step.kind) {
                for &o in outs {
                    high_water = high_water.max(m.places[o].as_ref().map_or(0, |p| p.1));
                }
            }
            // With one, only the intermediates the plan placed nowhere (a few slots, precomputed): per step this is
            // the enqueueing thread's time, which a GPU's short kernels wait on.
            let elsewhere = match &self.memory {
                Some(m) => m.elsewhere.iter().filter_map(|&s| slots[s].as_ref()).map(ClBuffer::byte_len).sum(),
                None => live_bytes(&slots, &fixed),
            };
            peak = peak.max(high_water + elsewhere);
            let dead: Vec<ClBuffer> = slots
                .iter_mut()
                .enumerate()
                .filter(|(s, _)| self.last_use[*s] == i)
                .filter_map(|(_, b)| b.take())
                .collect();
            kept.extend(self.release(dead));
        }
        self.peak.fetch_max(peak, std::sync::atomic::Ordering::Relaxed);
        let mut events = Vec::new();
        let last = match self.enqueue(bound, &mut events) {
            Ok(last) => last,
            Err(e) => {
                // What was enqueued before the failure may still run on memory this run is about to drop (an
                // imported input's host memory): wait for it first. A lost device has nothing left to run.
                let _ = self.target.finish();
                return Err(e);
            }
        };
        if let Some(e) = &last {
            self.touched(e, &slots, &written, &kept);
        }
        drop(kept);
        if self.target.inner.profiling {
            self.target.finish()?;
            let mut times = self.times.lock().unwrap_or_else(|p| p.into_inner());
            times.0.resize(self.steps.len(), Vec::new());
            times.1 += 1;
            for (i, k, e) in events {
                let (start, end) = (e.profiling_command_start(), e.profiling_command_end());
                if let (Ok(start), Ok(end)) = (start, end) {
                    let launches = &mut times.0[i];
                    if launches.len() <= k {
                        launches.resize(k + 1, 0);
                    }
                    launches[k] += end.saturating_sub(start);
                }
            }
        }
        let outputs = self
            .outputs
            .iter()
            .map(|b| {
                let buffer = slots[b.slot].clone().ok_or_else(|| ClError::Input {
                    input: b.name.clone(),
                    message: "the output was not computed".into(),
                })?;
                self.hand_out(&buffer);
                buffer
                    .with_shape(&b.shape)
                    .into_tensor(LedgerTag::new(ledger, b.name.as_str()))
                    .map_err(|e| ClError::Transfer { value: b.name.clone(), message: e.to_string() })
            })
            .collect();
        // What the run still holds (inputs, values kept to the end) goes back to the pool, for the next run to bind
        // the same buffers (`replay.rs`, rule 5); constants stay the program's.
        let held: Vec<ClBuffer> = slots
            .iter_mut()
            .enumerate()
            .filter(|(s, _)| !self.consts.iter().any(|(c, _)| c == s))
            .filter_map(|(_, b)| b.take())
            .collect();
        drop(self.release(held));
        outputs
    }

    /// The buffer to run on for input `t`, held in OpenCL memory (`buffer/external.rs`, rule 5): this target's own
    /// memory used as is when packed, padded rows packed on the device (one relayout); another target's buffer
    /// copied in through the host (a download and an upload, counted). `None` leaves `t` to the host paths.
    fn held_input(&self, held: &ClBuffer, t: &Tensor<'static>, ledger: &Ledger) -> Result<Option<ClBuffer>> {
        let name = t.name_or_unnamed();
        let packed = t.is_row_major() && t.is_whole_storage();
        if held.is_of(&self.target) {
            if packed {
                return Ok(Some(held.with_shape(t.shape())));
            }
            // Rows at one pitch are packed on the device; any other view (a transposed output) takes the host
            // path, its download and upload counted.
            return held.packed_on_device(t, ledger);
        }
        if !packed || t.is_host_readable() {
            return Ok(None);
        }
        // Another target's memory: read to the host and written here, each counted, as the plan counts a value
        // crossing between devices.
        let transfer = |m: String| ClError::Transfer { value: name.to_string(), message: m };
        let bytes = held.read_now()?;
        let up = <ClBuffer as DeviceBuffer>::upload(&self.target, t.dt(), t.shape(), &bytes)
            .map_err(|e| transfer(e.to_string()))?;
        let (from, tag) = (DeviceBuffer::space(held), LedgerTag::new(ledger, name));
        let why = || format!("a buffer of another OpenCL target ({from}), through the host").into();
        tag.record(MoveKind::Download, &from, &MemorySpace::HOST, bytes.len(), why);
        tag.record(MoveKind::Upload, &MemorySpace::HOST, self.target.space(), bytes.len(), why);
        Ok(Some(up.value))
    }

    /// Binds step `i`'s launches to buffers (its outputs and scratch allocated, `replay.rs` rule 5), appended to
    /// `bound`; `written` marks the slots its launches write.
    fn bind_step(
        &self,
        i: usize,
        step: &Step,
        slots: &mut [Option<ClBuffer>],
        bound: &mut Vec<Bound>,
        written: &mut [bool],
    ) -> Result<()> {
        let missing = |s: usize| ClError::Step {
            node: step.name.clone(),
            op: step.op,
            message: format!("value slot {s} is empty"),
        };
        let missing_own = |what: &str| ClError::Step {
            node: step.name.clone(),
            op: step.op,
            message: format!("the program has no {what}"),
        };
        match &step.kind {
            StepKind::Alias { from, to } => {
                let b = slots[*from].clone().ok_or_else(|| missing(*from))?;
                slots[*to] = Some(b.with_shape(&self.types[*to].1));
            }
            StepKind::Launches { outs, scratch, launches } => {
                let alloc_err = |e: stowage_runtime::RuntimeError| ClError::Step {
                    node: step.name.clone(),
                    op: step.op,
                    message: e.to_string(),
                };
                for &o in outs {
                    let placed = self.memory.as_ref().and_then(|m| m.places[o].as_ref());
                    slots[o] = Some(match placed {
                        Some((region, _)) => region.clone(),
                        None => {
                            let (dt, shape) = &self.types[o];
                            self.buffer(*dt, shape).map_err(alloc_err)?
                        }
                    });
                }
                let scratch: Vec<ClBuffer> = scratch
                    .iter()
                    .map(|&bytes| self.buffer(DatumType::U8, &[bytes]).map_err(alloc_err))
                    .collect::<Result<_>>()?;
                let get = |r: &ArgRef| -> Result<((usize, u64), (u64, u64))> {
                    let b = match *r {
                        ArgRef::Slot(s) => slots[s].as_ref().ok_or_else(|| missing(s))?,
                        ArgRef::Scratch(k) => &scratch[k],
                        ArgRef::Counters => self.counters.as_ref().ok_or_else(|| missing_own("tile counters"))?,
                        ArgRef::Accumulators => {
                            self.accumulators.as_ref().ok_or_else(|| missing_own("accumulators"))?
                        }
                    };
                    let (mem, offset) = b.kernel_arg();
                    Ok(((mem.get() as usize, offset), b.kernel_key()))
                };
                for l in launches.iter().filter(|l| !l.global.contains(&0)) {
                    let (args, keys) = l.args.iter().map(get).collect::<Result<Vec<_>>>()?.into_iter().unzip();
                    bound.push(Bound {
                        step: i,
                        kernel: l.kernel,
                        args,
                        keys,
                        global: l.global.clone(),
                        local: l.local.clone(),
                    });
                    for w in &l.writes {
                        if let ArgRef::Slot(s) = w {
                            written[*s] = true;
                        }
                    }
                }
                // Scratch goes back to the pool at once: the next writer of its memory is enqueued after these.
                for b in scratch {
                    drop(self.recycle(b));
                }
            }
        }
        Ok(())
    }

    /// Enqueues a run's launches (`replay.rs`, rule 3): the recording when it was made from launches equal to
    /// these, a new recording when the run before was bound as this one, else each launch. Returns the last
    /// command's event; with profiling, each launch's event goes to `events` with its step and place in it.
    fn enqueue(&self, bound: Vec<Bound>, events: &mut Vec<(usize, usize, Arc<Event>)>) -> Result<Option<Arc<Event>>> {
        if bound.is_empty() {
            return Ok(None);
        }
        if !self.target.replays() {
            return self.launch_each(&bound, events);
        }
        let mut state = self.replay.lock().unwrap_or_else(|p| p.into_inner());
        match &*state {
            Replay::Recorded(r) if r.launches == bound => {
                if let Ok(e) = r.enqueue() {
                    self.replayed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok(Some(e));
                }
            }
            Replay::Seen(before) if *before == bound => {
                let recorded = Recording::record(&self.target, &self.kernels, bound.clone());
                if let Some((r, e)) = recorded.ok().and_then(|r| r.enqueue().ok().map(|e| (r, e))) {
                    self.replayed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    *state = Replay::Recorded(r);
                    return Ok(Some(e));
                }
            }
            Replay::Refused => return self.launch_each(&bound, events),
            _ => {
                let last = self.launch_each(&bound, events)?;
                *state = Replay::Seen(bound);
                return Ok(last);
            }
        }
        // A recording or a replay the driver refused: this program launches kernel by kernel from now on.
        *state = Replay::Refused;
        self.launch_each(&bound, events)
    }

    /// Enqueues each of `bound`, in order.
    fn launch_each(&self, bound: &[Bound], events: &mut Vec<(usize, usize, Arc<Event>)>) -> Result<Option<Arc<Event>>> {
        let mut last = None;
        let mut place = (usize::MAX, 0);
        for l in bound {
            let step = &self.steps[l.step];
            let failed = |e: ClError| ClError::Step { node: step.name.clone(), op: step.op, message: e.to_string() };
            let kernel = self.kernels[l.kernel].lock().unwrap_or_else(|p| p.into_inner());
            self.target.set_buffer_args(&kernel, &l.args).map_err(failed)?;
            let event = self.target.enqueue_kernel(&kernel, &l.global, l.local.as_deref()).map_err(failed)?;
            place = if place.0 == l.step { (l.step, place.1 + 1) } else { (l.step, 0) };
            if let Some(e) = event {
                if self.target.inner.profiling {
                    events.push((place.0, place.1, Arc::clone(&e)));
                }
                last = Some(e);
            }
        }
        Ok(last)
    }

    /// Gives the run's last event `e` to every buffer it may have touched (`replay.rs`, rule 6): the slots still
    /// held (as their writer where a launch wrote them), the buffers dropped on the way, the pool and the arena's
    /// places.
    fn touched(&self, e: &Arc<Event>, slots: &[Option<ClBuffer>], written: &[bool], kept: &[ClBuffer]) {
        for (s, b) in slots.iter().enumerate() {
            if let Some(b) = b {
                if written[s] {
                    b.written_by_shared(Arc::clone(e));
                } else {
                    b.read_by(e);
                }
            }
        }
        for b in kept {
            b.read_by(e);
        }
        for b in self.pool.lock().unwrap_or_else(|p| p.into_inner()).values().flatten() {
            b.read_by(e);
        }
        if let Some(m) = &self.memory {
            for (b, _) in m.places.iter().flatten() {
                b.read_by(e);
            }
        }
    }

    /// Puts each size's pooled buffers in the order of their allocations' ids, so that a run takes the same buffers
    /// as the run before it (`replay.rs`, rule 5).
    fn pool_in_order(&self) {
        for v in self.pool.lock().unwrap_or_else(|p| p.into_inner()).values_mut() {
            v.sort_by_key(ClBuffer::id);
        }
    }

    /// `bytes` uploaded for a `dt` value of `shape`, into a pooled buffer (the one the run before uploaded into,
    /// `replay.rs` rule 5).
    fn upload(&self, dt: DatumType, shape: &[usize], bytes: &[u8]) -> stowage_runtime::Result<Transferred<ClBuffer>> {
        if bytes.is_empty() {
            return <ClBuffer as DeviceBuffer>::upload(&self.target, dt, shape, bytes);
        }
        let dst = self.buffer(dt, shape)?;
        dst.write_from_host(bytes)?;
        Ok(Transferred { value: dst, copied: true })
    }

    /// Takes back into the pool the outputs handed out by earlier runs that the caller has dropped since: the
    /// next run allocates its outputs where the run before did (`replay.rs`, rule 5).
    fn reclaim(&self) {
        let mut handed = self.handed_out.lock().unwrap_or_else(|p| p.into_inner());
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        for b in std::mem::take(&mut *handed) {
            if b.is_reclaimable() {
                pool.entry(b.byte_len()).or_default().push(b);
            } else {
                handed.push(b);
            }
        }
    }

    /// Remembers output `b` for [`ClProgram::reclaim`], when the program allocated it (never a caller's memory: an
    /// output may be an input seen through a Reshape, and a caller's wrapped `cl_mem` or DLPack tensor is theirs)
    /// and it is not remembered yet.
    fn hand_out(&self, b: &ClBuffer) {
        if !self.owned.lock().unwrap_or_else(|p| p.into_inner()).contains(&b.id()) {
            return;
        }
        let mut handed = self.handed_out.lock().unwrap_or_else(|p| p.into_inner());
        if !handed.iter().any(|c| c.same_memory(b)) {
            handed.push(b.clone());
        }
    }

    /// A buffer for a `dt` value of `shape`: a dead one of the same byte length where there is one, else a new
    /// one. Commands run in queue order, so the new writer runs after every command that used the old value.
    fn buffer(&self, dt: DatumType, shape: &[usize]) -> stowage_runtime::Result<ClBuffer> {
        let len = shape.iter().product::<usize>() * dt.size_of();
        let reused = self.pool.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&len).and_then(Vec::pop);
        match reused {
            Some(b) => Ok(b.retyped(dt, shape)),
            None => {
                let b = ClBuffer::allocate(&self.target, dt, shape)?;
                self.owned.lock().unwrap_or_else(|p| p.into_inner()).insert(b.id());
                Ok(b)
            }
        }
    }

    /// Returns dead values' buffers to the pool ([`ClProgram::recycle`]), each memory once: the slots of a value and
    /// its aliases die together and hold clones of one buffer, which would otherwise keep each other from being
    /// unique. Returns the buffers not pooled, for the run to keep until its commands are enqueued.
    fn release(&self, dead: Vec<ClBuffer>) -> Vec<ClBuffer> {
        let mut distinct: Vec<ClBuffer> = Vec::with_capacity(dead.len());
        for b in dead {
            if !distinct.iter().any(|d| d.same_memory(&b)) {
                distinct.push(b);
            }
        }
        distinct.into_iter().filter_map(|b| self.recycle(b)).collect()
    }

    /// Keeps `b` for reuse when nothing else holds its memory (an alias still alive, an imported input, a buffer
    /// handed out as an output are never pooled); returns it otherwise, for the run to keep until its commands are
    /// enqueued.
    fn recycle(&self, b: ClBuffer) -> Option<ClBuffer> {
        if b.is_unique() && !b.is_imported() {
            self.pool.lock().unwrap_or_else(|p| p.into_inner()).entry(b.byte_len()).or_default().push(b);
            None
        } else {
            Some(b)
        }
    }
}
