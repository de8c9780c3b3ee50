//! Checks across attributes: what each space requires, and what contradicts what.
//! Every violation is reported, each at the attribute it is about.

use syn::GenericParam;

use crate::ast::Input;
use crate::attr::{self, LayoutName, Mappable, Role, Space};
use crate::ctxt::Ctxt;

fn power_of_two(cx: &Ctxt, attr: &Option<attr::Attr<u64>>) {
    if let Some(a) = attr {
        if !a.value.is_power_of_two() {
            cx.error_at(&a.key, format!("`{}` must be a power of two, got {}", a.key, a.value));
        }
    }
}

/// Validate `input`, reporting into `cx`.
pub fn check(cx: &Ctxt, input: &Input<'_>) {
    let d = &input.descriptor;
    let ident = &input.original.ident;
    if !d.seen {
        cx.error_at(ident, "missing #[storage(…)]: describe the memory, at least `space`, `name` and `alignment`");
        return;
    }
    for key in [attr::SPACE, attr::NAME, attr::ALIGNMENT] {
        if !d.given.iter().any(|k| k == key) {
            cx.error_at(ident, format!("missing `{key} = …` in #[storage(…)]"));
        }
    }
    power_of_two(cx, &d.alignment);
    power_of_two(cx, &d.row_pitch_alignment);
    power_of_two(cx, &d.import_alignment);
    check_layouts(cx, input);
    check_fields(cx, input);
    check_generics(cx, input);
    let Some(space) = &d.space else { return };
    match space.value {
        Space::Host => check_host(cx, input),
        Space::Device | Space::Unified => check_device(cx, input),
    }
    check_mapping(cx, input, space.value);
}

fn check_layouts(cx: &Ctxt, input: &Input<'_>) {
    let d = &input.descriptor;
    let Some(layouts) = &d.layouts else { return };
    if layouts.value.is_empty() {
        cx.error_at(&layouts.key, "`layouts()` lists no layout; name at least one, or leave it out for `row_major`");
    }
    for (i, (layout, ident)) in layouts.value.iter().enumerate() {
        if layouts.value[..i].iter().any(|(other, _)| other == layout) {
            cx.error_at(ident, format!("conflicting layouts: `{ident}` is listed twice"));
        }
        if *layout == LayoutName::PaddedRows && d.row_pitch_alignment.is_none() {
            cx.error_at(
                ident,
                "conflicting layouts: `padded_rows` needs `row_pitch_alignment = N` to say how rows are padded",
            );
        }
    }
    if let Some(pitch) = &d.row_pitch_alignment {
        if !layouts.value.iter().any(|(l, _)| *l == LayoutName::PaddedRows) {
            cx.error_at(
                &pitch.key,
                "conflicting layouts: `row_pitch_alignment` is set but `layouts(…)` has no `padded_rows`",
            );
        }
    }
}

fn check_fields(cx: &Ctxt, input: &Input<'_>) {
    for role in [Role::Buffer, Role::Dtype, Role::Shape, Role::RunScoped] {
        let mut with_role = input.fields.iter().filter_map(|f| f.role.as_ref().filter(|(r, _)| *r == role));
        with_role.next();
        for (_, ident) in with_role {
            cx.error_at(ident, format!("more than one field is marked #[storage({ident})]"));
        }
    }
    if input.field(Role::Buffer).is_none() {
        cx.error_at(&input.original.ident, "no field is marked #[storage(buffer)]: which field holds the memory?");
    }
}

fn check_generics(cx: &Ctxt, input: &Input<'_>) {
    let device = input.descriptor.space.as_ref().is_some_and(|s| s.value != Space::Host);
    for param in &input.original.generics.params {
        match param {
            GenericParam::Const(c) => {
                cx.error_at(c, "const generic parameters are not supported on a storage");
            }
            GenericParam::Lifetime(l) if device => {
                cx.error_at(l, "a device storage is shared across runs and cannot borrow: remove this lifetime");
            }
            _ => {}
        }
    }
}

fn check_host(cx: &Ctxt, input: &Input<'_>) {
    let d = &input.descriptor;
    for f in &d.functions {
        if f.key != attr::SPACE_OF {
            cx.error_at(&f.key, format!("host storage takes no `{}`: its bytes are host bytes already", f.key));
        }
    }
    if let Some(import) = &d.import_alignment {
        cx.error_at(&import.key, "`import_alignment` is for device storage: host memory needs no import");
    }
    if let Some(context) = &d.context {
        cx.error_at(&context.key, "host storage takes no `context`");
    }
    if let Some(staging) = &d.staging {
        cx.error_at(&staging.key, "`staging` is for device storage: host memory is never transferred");
    }
}

fn check_device(cx: &Ctxt, input: &Input<'_>) {
    let d = &input.descriptor;
    let Some(space) = &d.space else { return };
    let what = if space.value == Space::Device { "a device" } else { "a unified-memory" };
    if d.function(attr::DOWNLOAD).is_none() {
        cx.error_at(
            &space.key,
            format!("{what} storage needs `download = …`: without it its bytes never reach the host"),
        );
    }
    // `wait` is what keeps LazyHost's rule 2 (wait on the producing thread, not the reader's).
    for key in [attr::UPLOAD, attr::ALLOCATE, attr::COPY, attr::WAIT] {
        if d.function(key).is_none() {
            cx.error_at(&space.key, format!("{what} storage needs `{key} = …`"));
        }
    }
    if d.context.is_none() {
        cx.error_at(&space.key, format!("{what} storage needs `context = Type`: what uploads go through"));
    }
    for (key, present) in
        [(attr::BANDWIDTH_GBPS, d.bandwidth_gbps.is_some()), (attr::LATENCY_US, d.latency_us.is_some())]
    {
        if !present {
            cx.error_at(&space.key, format!("{what} storage needs `{key} = …` for the planner's cost model"));
        }
    }
    for role in [Role::Dtype, Role::Shape] {
        if input.field(role).is_none() {
            let name = if role == Role::Dtype { attr::DTYPE } else { attr::SHAPE };
            cx.error_at(&input.original.ident, format!("{what} storage needs a field marked #[storage({name})]"));
        }
    }
}

fn check_mapping(cx: &Ctxt, input: &Input<'_>, space: Space) {
    let d = &input.descriptor;
    let map = d.function(attr::MAP);
    let unmap = d.function(attr::UNMAP);
    match (map, unmap) {
        (Some(m), None) => cx.error_at(&m.key, "`map` without `unmap`: a mapping must be closable"),
        (None, Some(u)) => cx.error_at(&u.key, "`unmap` without `map`"),
        _ => {}
    }
    let Some(mappable) = &d.mappable else {
        if let Some(m) = map {
            cx.error_at(&m.key, "`map` is given but not `mappable = pointer | copy`: say what a mapping costs");
        }
        return;
    };
    match mappable.value {
        Mappable::No => {
            if let Some(m) = map {
                cx.error_at(&m.key, "`map` is given but `mappable = no`");
            }
        }
        Mappable::Pointer | Mappable::Copy if space != Space::Host && (map.is_none() || unmap.is_none()) => {
            cx.error_at(&mappable.key, "a host-mappable device storage needs `map = …` and `unmap = …`");
        }
        _ => {}
    }
    if space == Space::Host && mappable.value == Mappable::Copy {
        cx.error_at(&mappable.key, "host storage maps as a pointer: `mappable = copy` contradicts `space = host`");
    }
}
