//! The `#[storage(…)]` attributes: their names, in one place, and their parsing.
//!
//! Parsing keeps going after a bad key or value, so that every error is reported at once;
//! each is reported at the tokens it is about.

use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Path, Token, Type};

use crate::ctxt::Ctxt;

/// The attribute's name.
pub const STORAGE: &str = "storage";

/// Struct keys that take a value.
pub const SPACE: &str = "space";
pub const NAME: &str = "name";
pub const ALIGNMENT: &str = "alignment";
pub const ROW_PITCH_ALIGNMENT: &str = "row_pitch_alignment";
pub const LAYOUTS: &str = "layouts";
pub const MAPPABLE: &str = "mappable";
pub const STAGING: &str = "staging";
pub const IMPORT_ALIGNMENT: &str = "import_alignment";
pub const BANDWIDTH_GBPS: &str = "bandwidth_gbps";
pub const LATENCY_US: &str = "latency_us";
pub const CONTEXT: &str = "context";

/// Struct keys naming a backend function.
pub const ALLOCATE: &str = "allocate";
pub const UPLOAD: &str = "upload";
pub const DOWNLOAD: &str = "download";
pub const WAIT: &str = "wait";
pub const COPY: &str = "copy";
pub const SLICE: &str = "slice";
pub const MAP: &str = "map";
pub const UNMAP: &str = "unmap";
pub const IS_ON: &str = "is_on";
pub const SPACE_OF: &str = "space_of";
pub const UPLOAD_WITH: &str = "upload_with";
pub const FUNCTIONS: [&str; 11] =
    [ALLOCATE, UPLOAD, UPLOAD_WITH, DOWNLOAD, WAIT, COPY, SLICE, MAP, UNMAP, IS_ON, SPACE_OF];

/// Field roles.
pub const BUFFER: &str = "buffer";
pub const DTYPE: &str = "dtype";
pub const SHAPE: &str = "shape";
pub const RUN_SCOPED: &str = "run_scoped";

const STRUCT_KEYS: &str = "space, name, alignment, row_pitch_alignment, layouts, mappable, staging, import_alignment, \
     bandwidth_gbps, latency_us, context, allocate, upload, upload_with, download, wait, copy, slice, map, unmap, is_on, \
     space_of";

/// One attribute value and the key it was given under (for spans).
pub struct Attr<T> {
    pub key: Ident,
    pub value: T,
}

/// Where a storage's memory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    Host,
    Device,
    Unified,
}

/// A layout a storage holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutName {
    RowMajor,
    ColumnMajor,
    PaddedRows,
}

/// How the host maps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mappable {
    No,
    Pointer,
    Copy,
}

/// How transfers reach the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staging {
    None,
    Pinned,
}

/// The descriptor, as written on the struct.
#[derive(Default)]
pub struct Descriptor {
    /// The `storage` attributes seen (none: the descriptor is missing).
    pub seen: bool,
    /// Every key given, valid or not (so a bad value is not also reported as missing).
    pub given: Vec<String>,
    pub space: Option<Attr<Space>>,
    pub name: Option<Attr<LitStr>>,
    pub alignment: Option<Attr<u64>>,
    pub row_pitch_alignment: Option<Attr<u64>>,
    pub layouts: Option<Attr<Vec<(LayoutName, Ident)>>>,
    pub mappable: Option<Attr<Mappable>>,
    pub staging: Option<Attr<Staging>>,
    pub import_alignment: Option<Attr<u64>>,
    pub bandwidth_gbps: Option<Attr<f64>>,
    pub latency_us: Option<Attr<f64>>,
    pub context: Option<Attr<Type>>,
    /// Backend functions by key, in the order written.
    pub functions: Vec<Attr<Path>>,
}

impl Descriptor {
    /// The path given for backend function `key`.
    pub fn function(&self, key: &str) -> Option<&Attr<Path>> {
        self.functions.iter().find(|f| f.key == key)
    }
}

fn set<T>(cx: &Ctxt, slot: &mut Option<Attr<T>>, key: &Ident, value: Option<T>) {
    if slot.is_some() {
        cx.error_at(key, format!("duplicate storage attribute `{key}`"));
    } else if let Some(value) = value {
        *slot = Some(Attr { key: key.clone(), value });
    }
}

fn integer(cx: &Ctxt, key: &Ident, expr: &Expr) -> Option<u64> {
    if let Expr::Lit(ExprLit { lit: Lit::Int(int), .. }) = expr {
        match int.base10_parse::<u64>() {
            Ok(value) => return Some(value),
            Err(err) => cx.syn_error(err),
        }
        return None;
    }
    cx.error_at(expr, format!("expected an integer, like `{key} = 64`"));
    None
}

fn number(cx: &Ctxt, key: &Ident, expr: &Expr) -> Option<f64> {
    let parsed = match expr {
        Expr::Lit(ExprLit { lit: Lit::Float(f), .. }) => f.base10_parse::<f64>().ok(),
        Expr::Lit(ExprLit { lit: Lit::Int(i), .. }) => i.base10_parse::<f64>().ok(),
        _ => None,
    };
    match parsed {
        Some(value) if value.is_finite() && value > 0.0 => Some(value),
        _ => {
            cx.error_at(expr, format!("expected a positive number, like `{key} = 12.5`"));
            None
        }
    }
}

fn word(expr: &Expr) -> Option<&Ident> {
    match expr {
        Expr::Path(p) if p.qself.is_none() => p.path.get_ident(),
        _ => None,
    }
}

fn path(cx: &Ctxt, key: &Ident, expr: &Expr) -> Option<Path> {
    match expr {
        Expr::Path(p) if p.qself.is_none() => Some(p.path.clone()),
        _ => {
            cx.error_at(expr, format!("expected a path to a function, like `{key} = backend::{key}`"));
            None
        }
    }
}

/// Skip to the next `,` of the attribute, after a value that did not parse.
fn skip_to_comma(meta: &ParseNestedMeta) -> syn::Result<()> {
    while !meta.input.is_empty() && !meta.input.peek(Token![,]) {
        meta.input.parse::<proc_macro2::TokenTree>()?;
    }
    Ok(())
}

/// Parse `= value` as `T`, reporting a failure into `cx` and skipping the value, so that the
/// keys after it are still read.
fn value<T: syn::parse::Parse>(cx: &Ctxt, meta: &ParseNestedMeta) -> syn::Result<Option<T>> {
    match meta.value().and_then(|v| v.parse::<T>()) {
        Ok(parsed) => Ok(Some(parsed)),
        Err(err) => {
            cx.syn_error(err);
            skip_to_comma(meta)?;
            Ok(None)
        }
    }
}

/// Consume whatever value an unknown key has, so parsing can go on.
fn skip_value(meta: &ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in meta.input);
        content.parse::<proc_macro2::TokenStream>()?;
    }
    Ok(())
}

fn parse_layouts(cx: &Ctxt, meta: &ParseNestedMeta) -> syn::Result<Vec<(LayoutName, Ident)>> {
    let mut layouts = Vec::new();
    meta.parse_nested_meta(|inner| {
        let Some(ident) = inner.path.get_ident().cloned() else {
            cx.error_at(&inner.path, "expected a layout: `row_major`, `column_major` or `padded_rows`");
            return skip_value(&inner);
        };
        let layout = match ident.to_string().as_str() {
            "row_major" => LayoutName::RowMajor,
            "column_major" => LayoutName::ColumnMajor,
            "padded_rows" => LayoutName::PaddedRows,
            other => {
                cx.error_at(
                    &ident,
                    format!("unknown layout `{other}`; expected `row_major`, `column_major` or `padded_rows`"),
                );
                return skip_value(&inner);
            }
        };
        layouts.push((layout, ident));
        Ok(())
    })?;
    Ok(layouts)
}

/// Parse one `#[storage(…)]` on the struct into `d`.
pub fn parse_struct_attr(cx: &Ctxt, attr: &syn::Attribute, d: &mut Descriptor) {
    d.seen = true;
    let result = attr.parse_nested_meta(|meta| {
        let Some(key) = meta.path.get_ident().cloned() else {
            cx.error_at(&meta.path, format!("unknown storage attribute; expected one of: {STRUCT_KEYS}"));
            return skip_value(&meta);
        };
        let name = key.to_string();
        d.given.push(name.clone());
        if name == LAYOUTS {
            let layouts = parse_layouts(cx, &meta)?;
            set(cx, &mut d.layouts, &key, Some(layouts));
            return Ok(());
        }
        let known = [
            SPACE,
            NAME,
            ALIGNMENT,
            ROW_PITCH_ALIGNMENT,
            MAPPABLE,
            STAGING,
            IMPORT_ALIGNMENT,
            BANDWIDTH_GBPS,
            LATENCY_US,
            CONTEXT,
        ];
        if !known.contains(&name.as_str()) && !FUNCTIONS.contains(&name.as_str()) {
            cx.error_at(&key, format!("unknown storage attribute `{name}`; expected one of: {STRUCT_KEYS}"));
            return skip_value(&meta);
        }
        if name == CONTEXT {
            let ty: Option<Type> = value(cx, &meta)?;
            set(cx, &mut d.context, &key, ty);
            return Ok(());
        }
        let Some(expr) = value::<Expr>(cx, &meta)? else { return Ok(()) };
        if name == NAME {
            let value = match expr {
                Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Some(s),
                other => {
                    cx.error_at(&other, "expected a string, like `name = \"opencl\"`");
                    None
                }
            };
            set(cx, &mut d.name, &key, value);
            return Ok(());
        }
        match name.as_str() {
            SPACE => {
                let value = match word(&expr).map(Ident::to_string).as_deref() {
                    Some("host") => Some(Space::Host),
                    Some("device") => Some(Space::Device),
                    Some("unified") => Some(Space::Unified),
                    _ => {
                        cx.error_at(&expr, "expected `host`, `device` or `unified`");
                        None
                    }
                };
                set(cx, &mut d.space, &key, value);
            }
            MAPPABLE => {
                let value = match word(&expr).map(Ident::to_string).as_deref() {
                    Some("no") => Some(Mappable::No),
                    Some("pointer") => Some(Mappable::Pointer),
                    Some("copy") => Some(Mappable::Copy),
                    _ => {
                        cx.error_at(
                            &expr,
                            "expected `no`, `pointer` (mapping is a pointer) or `copy` (mapping copies)",
                        );
                        None
                    }
                };
                set(cx, &mut d.mappable, &key, value);
            }
            STAGING => {
                let value = match word(&expr).map(Ident::to_string).as_deref() {
                    Some("none") => Some(Staging::None),
                    Some("pinned") => Some(Staging::Pinned),
                    _ => {
                        cx.error_at(
                            &expr,
                            "expected `none` (transfers go straight to the device) or `pinned` (through a pinned \
                             host staging buffer the backend keeps)",
                        );
                        None
                    }
                };
                set(cx, &mut d.staging, &key, value);
            }
            ALIGNMENT => set(cx, &mut d.alignment, &key, integer(cx, &key, &expr)),
            ROW_PITCH_ALIGNMENT => set(cx, &mut d.row_pitch_alignment, &key, integer(cx, &key, &expr)),
            IMPORT_ALIGNMENT => set(cx, &mut d.import_alignment, &key, integer(cx, &key, &expr)),
            BANDWIDTH_GBPS => set(cx, &mut d.bandwidth_gbps, &key, number(cx, &key, &expr)),
            LATENCY_US => set(cx, &mut d.latency_us, &key, number(cx, &key, &expr)),
            _ => {
                if d.functions.iter().any(|f| f.key == key) {
                    cx.error_at(&key, format!("duplicate storage attribute `{key}`"));
                } else if let Some(p) = path(cx, &key, &expr) {
                    d.functions.push(Attr { key: key.clone(), value: p });
                }
            }
        }
        Ok(())
    });
    if let Err(err) = result {
        cx.syn_error(err);
    }
}

/// The role a `#[storage(…)]` gives a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Buffer,
    Dtype,
    Shape,
    RunScoped,
}

/// Parse the `#[storage(…)]` on a field: its role, if any.
pub fn parse_field_attr(cx: &Ctxt, attr: &syn::Attribute) -> Option<(Role, Ident)> {
    let mut role = None;
    let result = attr.parse_nested_meta(|meta| {
        let found = match meta.path.get_ident().map(Ident::to_string).as_deref() {
            Some(BUFFER) => Role::Buffer,
            Some(DTYPE) => Role::Dtype,
            Some(SHAPE) => Role::Shape,
            Some(RUN_SCOPED) => Role::RunScoped,
            _ => {
                cx.error_at(
                    &meta.path,
                    "unknown field storage attribute; expected `buffer`, `dtype`, `shape` or `run_scoped`",
                );
                return skip_value(&meta);
            }
        };
        let ident = meta.path.get_ident().cloned().unwrap_or_else(|| Ident::new("storage", meta.path.span()));
        if role.is_some() {
            cx.error_at(&ident, "a field has one storage role");
        } else {
            role = Some((found, ident));
        }
        Ok(())
    });
    if let Err(err) = result {
        cx.syn_error(err);
    }
    role
}
