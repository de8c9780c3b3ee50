//! Writing the code: parse, then check, then expand, in that order.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::DeriveInput;

use crate::ast::{Field, Input};
use crate::attr::{self, LayoutName, Mappable, Role, Space};
use crate::check;
use crate::ctxt::Ctxt;

/// The derive: the generated items, or the errors beside a stub.
pub fn derive(input: &DeriveInput) -> TokenStream {
    let cx = Ctxt::default();
    let parsed = Input::from_syn(&cx, input);
    if let Some(parsed) = &parsed {
        check::check(&cx, parsed);
    }
    match (cx.check(), parsed) {
        (Ok(()), Some(parsed)) => expand(&parsed),
        (Err(errors), _) => {
            let errors = errors.to_compile_error();
            let stub = stub(input);
            quote!(#errors #stub)
        }
        (Ok(()), None) => stub(input),
    }
}

/// What is emitted beside errors, so that uses of the type elsewhere do not add
/// follow-on errors: the descriptor constant and the formatting impls.
fn stub(input: &DeriveInput) -> TokenStream {
    let ident = &input.ident;
    let (ig, tg, wc) = input.generics.split_for_impl();
    quote! {
        #[automatically_derived]
        impl #ig #ident #tg #wc {
            /// Placeholder while the descriptor has errors.
            pub const DESCRIPTOR: ::stowage_runtime::StorageDescriptor = ::stowage_runtime::StorageDescriptor::HOST;
        }
        #[automatically_derived]
        impl #ig ::core::fmt::Debug for #ident #tg #wc {
            fn fmt(&self, _: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                ::core::unreachable!()
            }
        }
        #[automatically_derived]
        impl #ig ::core::fmt::Display for #ident #tg #wc {
            fn fmt(&self, _: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                ::core::unreachable!()
            }
        }
    }
}

struct Parts<'i, 'a> {
    input: &'i Input<'a>,
    space: Space,
    buffer: &'i Field<'a>,
}

impl Parts<'_, '_> {
    fn member(&self, role: Role) -> Option<&syn::Member> {
        self.input.field(role).map(|f| &f.member)
    }

    fn function(&self, key: &str) -> Option<&syn::Path> {
        self.input.descriptor.function(key).map(|f| &f.value)
    }

    /// `Self { … }` with `buffer`, `dtype` and `shape` given and every other field defaulted
    /// (under the same `cfg` as the field).
    fn build(&self, buffer: TokenStream, dtype: TokenStream, shape: TokenStream, scoped: TokenStream) -> TokenStream {
        let b = &self.buffer.member;
        let mut fields = vec![quote!(#b: #buffer)];
        if let Some(m) = self.member(Role::Dtype) {
            fields.push(quote!(#m: #dtype));
        }
        if let Some(m) = self.member(Role::Shape) {
            fields.push(quote!(#m: ::core::convert::From::from(#shape)));
        }
        if let Some(m) = self.member(Role::RunScoped) {
            fields.push(quote!(#m: #scoped));
        }
        for other in self.input.other_fields() {
            let m = &other.member;
            let cfgs = other.original.attrs.iter().filter(|a| a.path().is_ident("cfg"));
            fields.push(quote!(#(#cfgs)* #m: ::core::default::Default::default()));
        }
        quote!(Self { #(#fields),* })
    }
}

fn expand(input: &Input<'_>) -> TokenStream {
    let (Some(space), Some(buffer)) = (&input.descriptor.space, input.field(Role::Buffer)) else {
        return stub(input.original);
    };
    let parts = Parts { input, space: space.value, buffer };
    let descriptor = descriptor(&parts);
    let ident = &input.original.ident;
    let (ig, tg, wc) = input.original.generics.split_for_impl();
    let formatting = formatting(&parts);
    let body = match parts.space {
        Space::Host => host(&parts),
        Space::Device | Space::Unified => device(&parts, &descriptor),
    };
    quote! {
        #[automatically_derived]
        impl #ig #ident #tg #wc {
            /// This storage's memory, as the planner sees it.
            pub const DESCRIPTOR: ::stowage_runtime::StorageDescriptor = #descriptor;
        }
        #formatting
        #body
    }
}

fn usize_lit(v: u64) -> Literal {
    Literal::usize_unsuffixed(usize::try_from(v).unwrap_or(usize::MAX))
}

fn descriptor(p: &Parts<'_, '_>) -> TokenStream {
    let d = &p.input.descriptor;
    let name = d.name.as_ref().map(|n| n.value.value()).unwrap_or_default();
    let kind = match p.space {
        Space::Host => quote!(Host),
        Space::Device => quote!(Device),
        Space::Unified => quote!(Unified),
    };
    let alignment = usize_lit(d.alignment.as_ref().map_or(1, |a| a.value));
    let pitch = usize_lit(d.row_pitch_alignment.as_ref().map_or(1, |a| a.value));
    let layouts: Vec<_> = match &d.layouts {
        Some(l) => l.value.iter().map(|(l, _)| *l).collect(),
        None => vec![LayoutName::RowMajor],
    };
    let layouts = layouts.iter().map(|l| match l {
        LayoutName::RowMajor => quote!(::stowage_runtime::LayoutSupport::RowMajor),
        LayoutName::ColumnMajor => quote!(::stowage_runtime::LayoutSupport::ColumnMajor),
        LayoutName::PaddedRows => quote!(::stowage_runtime::LayoutSupport::PaddedRows),
    });
    let default_map = if p.space == Space::Host { Mappable::Pointer } else { Mappable::No };
    let map = match d.mappable.as_ref().map_or(default_map, |m| m.value) {
        Mappable::No => quote!(No),
        Mappable::Pointer => quote!(Pointer),
        Mappable::Copy => quote!(Copy),
    };
    let import = match &d.import_alignment {
        Some(a) => {
            let a = usize_lit(a.value);
            quote!(::core::option::Option::Some(#a))
        }
        None => quote!(::core::option::Option::None),
    };
    let bandwidth = match &d.bandwidth_gbps {
        Some(b) => {
            let b = Literal::f64_unsuffixed(b.value);
            quote!(#b)
        }
        None => quote!(f64::INFINITY),
    };
    let latency = Literal::f64_unsuffixed(d.latency_us.as_ref().map_or(0.0, |l| l.value));
    let can_slice = p.space == Space::Host || p.function(attr::SLICE).is_some();
    let staged = d.staging.as_ref().is_some_and(|s| s.value == attr::Staging::Pinned);
    let packs = p.function(attr::UPLOAD_WITH).is_some();
    quote! {
        ::stowage_runtime::StorageDescriptor {
            name: #name,
            kind: ::stowage_runtime::MemoryKind::#kind,
            alignment: #alignment,
            row_pitch_alignment: #pitch,
            layouts: &[#(#layouts),*],
            map: ::stowage_runtime::MapSupport::#map,
            import_alignment: #import,
            bandwidth_gbps: #bandwidth,
            latency_us: #latency,
            can_slice: #can_slice,
            staged: #staged,
            packs_on_upload: #packs,
        }
    }
}

/// `Debug` and `Display` from the descriptor and the dtype/shape fields: never device bytes.
fn formatting(p: &Parts<'_, '_>) -> TokenStream {
    let ident = &p.input.original.ident;
    let (ig, tg, wc) = p.input.original.generics.split_for_impl();
    let name = ident.to_string();
    let (space, len) = match p.space {
        Space::Host => {
            let b = &p.buffer.member;
            (
                quote!(::stowage_runtime::TensorStorage::space(self)),
                quote!(<[u8]>::len(::core::convert::AsRef::<[u8]>::as_ref(&self.#b))),
            )
        }
        _ => (
            quote!(::stowage_runtime::DeviceBuffer::space(self)),
            quote!(::stowage_runtime::DeviceBuffer::byte_len(self)),
        ),
    };
    let dtype = p.member(Role::Dtype).map(|m| quote!(.field("dtype", &self.#m)));
    let shape =
        p.member(Role::Shape).map(|m| quote!(.field("shape", &::core::convert::AsRef::<[usize]>::as_ref(&self.#m))));
    let shown = match (p.member(Role::Dtype), p.member(Role::Shape)) {
        (Some(d), Some(s)) => quote! {
            ::core::write!(f, "{} {}{:?}, {} bytes", #space, self.#d, ::core::convert::AsRef::<[usize]>::as_ref(&self.#s), #len)
        },
        _ => quote!(::core::write!(f, "{}, {} bytes", #space, #len)),
    };
    quote! {
        #[automatically_derived]
        impl #ig ::core::fmt::Debug for #ident #tg #wc {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(#name)
                    .field("space", &#space)
                    #dtype
                    #shape
                    .field("bytes", &#len)
                    .finish_non_exhaustive()
            }
        }
        #[automatically_derived]
        impl #ig ::core::fmt::Display for #ident #tg #wc {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                #shown
            }
        }
    }
}

fn host(p: &Parts<'_, '_>) -> TokenStream {
    let ident = &p.input.original.ident;
    let generics = &p.input.original.generics;
    let (ig, tg, wc) = generics.split_for_impl();
    let b = &p.buffer.member;
    let bytes = quote!(::core::convert::AsRef::<[u8]>::as_ref(&self.#b));
    let space = match p.function(attr::SPACE_OF) {
        Some(f) => quote_spanned!(f.span()=> #f(&self.#b)),
        None => quote!(::stowage_runtime::MemorySpace::HOST),
    };
    // Only a type without generics is known to be `'static`, as `Any` needs.
    let as_any = if generics.params.is_empty() {
        quote!(::core::option::Option::Some(self))
    } else {
        quote!(::core::option::Option::None)
    };
    let into_tensor = match (p.member(Role::Dtype), p.member(Role::Shape)) {
        (Some(d), Some(s)) => quote! {
            #[automatically_derived]
            impl #ig #ident #tg #wc {
                /// This storage as a packed row-major tensor of its datum type and shape.
                pub fn into_tensor<'t>(self) -> ::stowage_runtime::Result<::stowage_runtime::Tensor<'t>>
                where
                    Self: 't,
                {
                    let dt = self.#d;
                    let shape = ::std::vec::Vec::from(::core::convert::AsRef::<[usize]>::as_ref(&self.#s));
                    let layout = ::stowage_runtime::Layout::row_major(dt, &shape)?;
                    ::stowage_runtime::Tensor::from_storage(dt, &shape, layout, self)
                }
            }
        },
        _ => quote!(),
    };
    quote! {
        #[automatically_derived]
        impl #ig ::stowage_runtime::TensorStorage for #ident #tg #wc {
            fn byte_len(&self) -> usize {
                <[u8]>::len(#bytes)
            }
            fn space(&self) -> ::stowage_runtime::MemorySpace {
                #space
            }
            fn host_bytes(&self) -> ::core::option::Option<&[u8]> {
                ::core::option::Option::Some(#bytes)
            }
            fn materialize(&self) -> ::stowage_runtime::Result<&[u8]> {
                ::core::result::Result::Ok(#bytes)
            }
            fn host_bytes_mut(&mut self) -> ::stowage_runtime::Result<&mut [u8]> {
                ::core::result::Result::Ok(::core::convert::AsMut::<[u8]>::as_mut(&mut self.#b))
            }
            fn into_plain(self: ::std::boxed::Box<Self>) -> ::stowage_runtime::Result<::stowage_runtime::PlainStorage> {
                ::stowage_runtime::PlainStorage::copy_from(::core::convert::AsRef::<[u8]>::as_ref(&self.#b))
            }
            fn deep_clone(
                &self,
            ) -> ::stowage_runtime::Result<::std::boxed::Box<dyn ::stowage_runtime::TensorStorage>> {
                ::core::result::Result::Ok(::std::boxed::Box::new(::stowage_runtime::PlainStorage::copy_from(#bytes)?))
            }
            fn slice(
                &self,
                _bytes: ::core::ops::Range<usize>,
            ) -> ::stowage_runtime::Result<::core::option::Option<::std::boxed::Box<dyn ::stowage_runtime::TensorStorage>>> {
                // Host bytes are cheapest to view in place.
                ::core::result::Result::Ok(::core::option::Option::None)
            }
            fn as_any(&self) -> ::core::option::Option<&dyn ::core::any::Any> {
                #as_any
            }
        }
        #into_tensor
    }
}

fn device(p: &Parts<'_, '_>, descriptor: &TokenStream) -> TokenStream {
    let d = &p.input.descriptor;
    let ident = &p.input.original.ident;
    let (ig, tg, wc) = p.input.original.generics.split_for_impl();
    let b = &p.buffer.member;
    let (Some(dtype), Some(shape), Some(context)) = (p.member(Role::Dtype), p.member(Role::Shape), &d.context) else {
        return stub(p.input.original);
    };
    let context = &context.value;
    let rt = quote!(::stowage_runtime);
    let ok = quote!(::core::result::Result::Ok);
    let shape_of = quote!(::core::convert::AsRef::<[usize]>::as_ref(&self.#shape));
    let name = d.name.as_ref().map(|n| n.value.value()).unwrap_or_default();
    let kind = format_ident!("{}", if p.space == Space::Device { "Device" } else { "Unified" });
    let space = match p.function(attr::SPACE_OF) {
        Some(f) => quote_spanned!(f.span()=> #f(&self.#b)),
        None => quote!(#rt::MemorySpace::device(#name, #rt::MemoryKind::#kind)),
    };
    let scoped = match p.member(Role::RunScoped) {
        Some(m) => quote!(self.#m),
        None => quote!(false),
    };
    let call = |key: &str, args: TokenStream| -> Option<TokenStream> {
        p.function(key).map(|f| quote_spanned!(f.span()=> #f(#args)))
    };
    let wait = call(attr::WAIT, quote!(&self.#b));
    let download = call(attr::DOWNLOAD, quote!(&self.#b));
    let upload = call(attr::UPLOAD, quote!(cx, bytes));
    // Without `upload_with`, the bytes are written on the host and uploaded.
    let upload_with = call(attr::UPLOAD_WITH, quote!(cx, len, fill)).unwrap_or_else(|| {
        quote! {{
            let mut host = #rt::PlainStorage::zeroed(len)?;
            fill(host.as_bytes_mut())?;
            let bytes = host.as_bytes();
            #upload
        }}
    });
    let allocate = call(attr::ALLOCATE, quote!(cx, len));
    let copy = call(attr::COPY, quote!(&src.#b, &self.#b));
    // Without `is_on`, a buffer is never assumed to be on the caller's device: it is uploaded.
    let is_on = call(attr::IS_ON, quote!(&self.#b, cx)).unwrap_or_else(|| quote!(false));
    let uploaded = p.build(quote!(uploaded.value), quote!(dt), quote!(shape), quote!(false));
    let allocated = p.build(quote!(buffer), quote!(dt), quote!(shape), quote!(false));
    let slice = match call(attr::SLICE, quote!(&self.#b, bytes)) {
        Some(call) => {
            let sliced = p.build(quote!(buffer), quote!(self.#dtype), quote!(&[len][..]), scoped.clone());
            quote! {
                let len = bytes.len() / self.#dtype.size_of();
                ::core::result::Result::Ok(#call?.map(|buffer| #sliced))
            }
        }
        None => quote!(#ok(::core::option::Option::None)),
    };
    let not_mappable = quote! {
        ::core::result::Result::Err(#rt::RuntimeError::Device {
            space: #rt::DeviceBuffer::space(self),
            op: "map",
            tensor: ::std::string::String::from("<device buffer>"),
            bytes: #rt::DeviceBuffer::byte_len(self),
            message: ::std::string::String::from("this storage is not host-mappable"),
        })
    };
    let mappable = d.mappable.as_ref().is_some_and(|m| m.value != Mappable::No);
    let (map_read, map_write) = match (p.function(attr::MAP), p.function(attr::UNMAP)) {
        (Some(map), Some(unmap)) if mappable => {
            let open = |mode: TokenStream| {
                quote_spanned! {map.span()=>
                    let mapped = #map(&self.#b, #rt::MapMode::#mode)?;
                    let buffer = &self.#b;
                    #ok(#rt::Transferred {
                        value: ::std::boxed::Box::new(#rt::derive_support::BackendMapping::new(
                            mapped.value,
                            move |mapping| #unmap(buffer, mapping),
                        )),
                        copied: mapped.copied,
                    })
                }
            };
            (open(quote!(Read)), open(quote!(Write)))
        }
        _ => (not_mappable.clone(), not_mappable),
    };
    quote! {
        #[automatically_derived]
        impl #ig #rt::DeviceBuffer for #ident #tg #wc {
            type Context = #context;
            const DESCRIPTOR: #rt::StorageDescriptor = #descriptor;

            fn space(&self) -> #rt::MemorySpace {
                #space
            }
            fn byte_len(&self) -> usize {
                #rt::derive_support::byte_len(self.#dtype, #shape_of)
            }
            fn is_run_scoped(&self) -> bool {
                #scoped
            }
            fn wait(&self) -> #rt::Result<()> {
                #wait
            }
            fn download(&self) -> #rt::Result<#rt::Transferred<::std::sync::Arc<#rt::PlainStorage>>> {
                #download
            }
            fn upload(
                cx: &Self::Context,
                dt: #rt::DatumType,
                shape: &[usize],
                bytes: &[u8],
            ) -> #rt::Result<#rt::Transferred<Self>> {
                let uploaded = #upload?;
                #ok(#rt::Transferred { value: #uploaded, copied: uploaded.copied })
            }
            fn upload_with(
                cx: &Self::Context,
                dt: #rt::DatumType,
                shape: &[usize],
                len: usize,
                fill: &mut dyn FnMut(&mut [u8]) -> #rt::Result<()>,
            ) -> #rt::Result<#rt::Transferred<Self>> {
                let uploaded = #upload_with?;
                #ok(#rt::Transferred { value: #uploaded, copied: uploaded.copied })
            }
            fn is_on(&self, cx: &Self::Context) -> bool {
                #is_on
            }
            fn slice(&self, bytes: ::core::ops::Range<usize>) -> #rt::Result<::core::option::Option<Self>> {
                #slice
            }
            fn map_read_bytes(
                &self,
            ) -> #rt::Result<#rt::Transferred<::std::boxed::Box<dyn #rt::ReadMapping + '_>>> {
                #map_read
            }
            fn map_write_bytes(
                &mut self,
            ) -> #rt::Result<#rt::Transferred<::std::boxed::Box<dyn #rt::WriteMapping + '_>>> {
                #map_write
            }
        }

        #[automatically_derived]
        impl #ig #ident #tg #wc {
            /// A new buffer for `shape` elements of `dt` on the device of `cx`.
            pub fn allocate(cx: &#context, dt: #rt::DatumType, shape: &[usize]) -> #rt::Result<Self> {
                let len = #rt::derive_support::checked_byte_len(dt, shape)?;
                let buffer = #allocate?;
                #ok(#allocated)
            }

            /// This buffer as it crosses the model boundary: a lazy host tensor of its datum
            /// type and shape, nothing read back (a run-scoped view is copied out).
            pub fn into_tensor(self, tag: #rt::LedgerTag) -> #rt::Result<#rt::Tensor<'static>> {
                let dt = self.#dtype;
                let shape = ::std::vec::Vec::from(#shape_of);
                #rt::LazyHost::at_boundary(self, dt, &shape, tag)
            }

            /// The buffer to hand a kernel on the device of `cx` for `tensor`: its own device
            /// buffer when it came from an earlier run there, else one upload (in `ledger`).
            pub fn from_tensor(
                tensor: &#rt::Tensor<'_>,
                cx: &#context,
                ledger: &#rt::Ledger,
            ) -> #rt::Result<Self> {
                #rt::device_input::<Self>(tensor, cx, ledger)
            }

            /// Copy `src`'s bytes into this buffer on the device, recorded in `tag`'s ledger.
            pub fn copy_from(&mut self, src: &Self, tag: &#rt::LedgerTag) -> #rt::Result<()> {
                #copy?;
                tag.record(
                    #rt::MoveKind::DeviceToDevice,
                    &#rt::DeviceBuffer::space(src),
                    &#rt::DeviceBuffer::space(self),
                    #rt::DeviceBuffer::byte_len(src),
                    || "device-to-device copy".into(),
                );
                #ok(())
            }
        }
    }
}
