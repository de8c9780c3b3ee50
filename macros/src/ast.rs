//! The derive's input in a borrowed form that keeps a pointer to the original syntax, so
//! any error can point back at it.

use syn::{Data, DeriveInput, Fields, Ident, Member};

use crate::attr::{self, Descriptor, Role};
use crate::ctxt::Ctxt;

/// One field of the struct.
pub struct Field<'a> {
    pub original: &'a syn::Field,
    pub member: Member,
    pub role: Option<(Role, Ident)>,
}

/// A struct deriving `TensorStorage`.
pub struct Input<'a> {
    pub original: &'a DeriveInput,
    pub descriptor: Descriptor,
    pub fields: Vec<Field<'a>>,
}

impl<'a> Input<'a> {
    /// Parse `input`, reporting what is malformed into `cx`. `None` when it is not a struct
    /// with named fields (nothing else can be checked then).
    pub fn from_syn(cx: &Ctxt, input: &'a DeriveInput) -> Option<Self> {
        let fields = match &input.data {
            Data::Struct(data) => match &data.fields {
                Fields::Named(named) => &named.named,
                Fields::Unnamed(_) | Fields::Unit => {
                    cx.error_at(
                        &input.ident,
                        "#[derive(TensorStorage)] needs named fields: mark them #[storage(buffer)], #[storage(dtype)], #[storage(shape)]",
                    );
                    return None;
                }
            },
            Data::Enum(data) => {
                cx.error_at(data.enum_token, "#[derive(TensorStorage)] is for structs; an enum cannot be a storage");
                return None;
            }
            Data::Union(data) => {
                cx.error_at(data.union_token, "#[derive(TensorStorage)] is for structs; a union cannot be a storage");
                return None;
            }
        };
        let mut descriptor = Descriptor::default();
        for a in input.attrs.iter().filter(|a| a.path().is_ident(attr::STORAGE)) {
            attr::parse_struct_attr(cx, a, &mut descriptor);
        }
        let fields = fields
            .iter()
            .map(|field| {
                let mut role = None;
                for a in field.attrs.iter().filter(|a| a.path().is_ident(attr::STORAGE)) {
                    let parsed = attr::parse_field_attr(cx, a);
                    if role.is_some() && parsed.is_some() {
                        cx.error_at(a, "a field has one storage role");
                    } else if parsed.is_some() {
                        role = parsed;
                    }
                }
                let member = field.ident.clone().map(Member::Named).unwrap_or_else(|| Member::Unnamed(0.into()));
                Field { original: field, member, role }
            })
            .collect();
        Some(Input { original: input, descriptor, fields })
    }

    /// The field with `role`, if one has it.
    pub fn field(&self, role: Role) -> Option<&Field<'a>> {
        self.fields.iter().find(|f| f.role.as_ref().is_some_and(|(r, _)| *r == role))
    }

    /// Fields with no storage role: filled with `Default::default()` when the derive builds a value.
    pub fn other_fields(&self) -> impl Iterator<Item = &Field<'a>> {
        self.fields.iter().filter(|f| f.role.is_none())
    }
}
