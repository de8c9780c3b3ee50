//! The typed module [`crate::Build`] generates for a model: a `Model` with one `run` argument per graph input,
//! typed as a nested array of its datum type and static shape (checked when the caller's crate compiles), and an
//! `Outputs` struct of lazy tensors. An input the plan uses in place only at an alignment is taken as
//! `impl Into<Input<T>>`: an `&Aligned<T>` is used in place, a plain `&T` is copied once, and the copy is counted.

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use stowage_compiler::ir::Graph;
use stowage_compiler::plan::{InputAccess, Plan};
use stowage_runtime::DatumType;

use super::names::Idents;
use super::source::{built_literal, copies_items, graph_items, kernel_items, summary, unparse, Source};

fn elem(dt: DatumType) -> Result<(TokenStream, TokenStream), String> {
    let (ty, variant) = match dt {
        DatumType::F32 => (quote!(f32), quote!(F32)),
        DatumType::F64 => (quote!(f64), quote!(F64)),
        DatumType::F16 => (quote!(::stowage_driver::model::half::f16), quote!(F16)),
        DatumType::I8 => (quote!(i8), quote!(I8)),
        DatumType::I16 => (quote!(i16), quote!(I16)),
        DatumType::I32 => (quote!(i32), quote!(I32)),
        DatumType::I64 => (quote!(i64), quote!(I64)),
        DatumType::U8 => (quote!(u8), quote!(U8)),
        DatumType::U16 => (quote!(u16), quote!(U16)),
        DatumType::U32 => (quote!(u32), quote!(U32)),
        DatumType::U64 => (quote!(u64), quote!(U64)),
        other => return Err(format!("inputs of type {other} have no typed form yet")),
    };
    Ok((ty, quote!(::stowage_driver::model::DatumType::#variant)))
}

/// `[[f32; 224]; 3]` for `f32[3, 224]`.
fn array(ty: TokenStream, shape: &[usize]) -> TokenStream {
    shape.iter().rev().fold(ty, |inner, &d| {
        let d = Literal::usize_unsuffixed(d);
        quote!([#inner; #d])
    })
}

/// The module's source, for `include!` inside a module of the caller's. `staged_outputs`: the model's outputs
/// when it is compiled in stages (`graph` is then its first part; the outputs' shapes are known at run time).
pub fn module_rs(
    s: &Source<'_>,
    name: &str,
    graph: &Graph,
    plan: &Plan,
    staged_outputs: Option<&[String]>,
) -> Result<String, String> {
    let docs: Vec<TokenStream> = summary(s)
        .into_iter()
        .map(|l| {
            let l = if l.is_empty() { l } else { format!(" {l}") };
            quote!(#[doc = #l])
        })
        .collect();
    // Each input names a type alias (beside `Model` and `Outputs`) and an argument of `run`; each output a field.
    let (mut aliases, mut args, mut field_names) =
        (Idents::new(&["Model", "Outputs"]), Idents::new(&[]), Idents::new(&[]));
    let mut types = Vec::new();
    let mut params = Vec::new();
    let mut raw = Vec::new();
    for &v in graph.inputs() {
        let name = graph.value(v).name.clone();
        let ty = graph.ty(v);
        let (elem_ty, dt) = elem(ty.dt).map_err(|e| format!("input '{name}': {e}"))?;
        let (alias, arg) = (aliases.camel(&name), args.snake(&name));
        let array_ty = array(elem_ty, &ty.shape);
        let dims = ty.shape.iter().map(|&d| Literal::usize_unsuffixed(d));
        let aligned = plan
            .inputs
            .iter()
            .find(|i| i.name == name)
            .is_some_and(|i| i.access.iter().any(|(space, a)| space != "host" && *a == InputAccess::InPlace));
        let shape_text = format!("{}{:?}", ty.dt, ty.shape);
        let doc = if aligned {
            format!(" Input `{name}`: {shape_text}. Used in place when given as an `Aligned` buffer.")
        } else {
            format!(" Input `{name}`: {shape_text}. Used in place, wherever it is.")
        };
        types.push(quote! {
            #[doc = #doc]
            pub type #alias = #array_ty;
        });
        if aligned {
            params.push(quote!(#arg: impl Into<::stowage_driver::model::Input<'a, #alias>>));
            raw.push(quote!(::stowage_driver::model::RawInput::from_input(#name, #dt, &[#(#dims),*], #arg.into())));
        } else {
            params.push(quote!(#arg: &#alias));
            raw.push(quote!(::stowage_driver::model::RawInput::in_place(#name, #dt, &[#(#dims),*], #arg)));
        }
    }
    let generics = if params.iter().any(|p| p.to_string().contains("'a")) { quote!(<'a>) } else { quote!() };
    let mut fields = Vec::new();
    let mut inits = Vec::new();
    let outputs: Vec<(String, String)> = match staged_outputs {
        Some(names) => names
            .iter()
            .map(|n| (n.clone(), format!(" Output `{n}`: its type and shape are known when the run makes it.")))
            .collect(),
        None => graph
            .outputs()
            .iter()
            .map(|o| {
                let ty = graph.ty(o.value);
                (o.name.clone(), format!(" Output `{}`: {}{:?}.", o.name, ty.dt, ty.shape))
            })
            .collect(),
    };
    for (name, doc) in &outputs {
        let field = field_names.snake(name);
        let missing = format!("output '{name}' is missing");
        fields.push(quote! {
            #[doc = #doc]
            pub #field: ::stowage_driver::model::Tensor<'static>
        });
        inits.push(
            quote!(#field: outputs.next().ok_or_else(|| ::stowage_driver::model::ModelError::Run(#missing.into()))?),
        );
    }
    let staged_file = format!("/{name}_staged.onnx");
    let built = built_literal(s, quote!(concat!(env!("OUT_DIR"), #staged_file)));
    let (plan_file, other_file) = (format!("/{name}_plan.bin"), format!("/{name}_other_plan.bin"));
    let copies = copies_items(
        s,
        true,
        quote!(concat!(env!("OUT_DIR"), #plan_file)),
        quote!(concat!(env!("OUT_DIR"), #other_file)),
    );
    let (graph_file, constants_file) = (format!("/{name}_graph.bin"), format!("/{name}_constants.bin"));
    let embedded = graph_items(
        s,
        quote!(concat!(env!("OUT_DIR"), #graph_file)),
        quote!(concat!(env!("OUT_DIR"), #constants_file)),
        &format!("stowage_{name}_constants"),
    );
    let kernels = kernel_items(s)?;
    let file = quote! {
        #embedded

        #kernels

        #copies

        static BUILT: ::stowage_driver::exe::Built = #built;

        #(#types)*

        /// The outputs of a run, in graph order: lazy tensors, read (and, from a device, downloaded once) when
        /// their bytes are asked for.
        pub struct Outputs {
            #(#fields),*
        }

        #(#docs)*
        pub struct Model {
            inner: ::stowage_driver::model::Model,
        }

        impl Model {
            /// Imports, plans and lowers the model, on one kernel thread. Its CPU kernels are linked in.
            pub fn new() -> Result<Model, ::stowage_driver::model::ModelError> {
                Model::with_threads(1)
            }

            /// [`Model::new`] with `threads` kernel threads.
            pub fn with_threads(threads: usize) -> Result<Model, ::stowage_driver::model::ModelError> {
                Ok(Model { inner: ::stowage_driver::model::Model::new(&BUILT, threads)? })
            }

            /// Runs the model once.
            pub fn run #generics (&self, #(#params),*) -> Result<Outputs, ::stowage_driver::model::ModelError> {
                let mut outputs = self.inner.run(&[#(#raw),*])?.into_iter();
                Ok(Outputs { #(#inits),* })
            }

            /// Every copy the runs have made (and every output read since).
            pub fn ledger(&self) -> &::stowage_driver::model::Ledger {
                self.inner.ledger()
            }
        }
    };
    let header = format!(
        "// @generated by stowage {} (stowage_driver::build::Build) from {}. Do not edit: it is written again by build.rs.\n",
        env!("CARGO_PKG_VERSION"),
        super::names::comment(s.model_name)
    );
    Ok(header + &unparse(file, "module")?)
}
