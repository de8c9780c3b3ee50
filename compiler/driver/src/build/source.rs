//! The generated `main.rs` of a built executable, written with quote and formatted with prettyplease: the model
//! embedded, the kernels of `kernels.o` declared and tabled, every planned copy on one line with its reason, and a
//! [`crate::exe::Built`] that hands them to [`crate::exe::main`].

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use stowage_compiler::plan::{Plan, When};

use crate::pipeline::RunOptions;

/// Everything the generated source says.
pub struct Source<'a> {
    /// The model's file name.
    pub model_name: &'a str,
    /// Build options (target, shapes, layouts, states, budget).
    pub options: &'a RunOptions,
    /// `--input-value`s: input name and the file (beside `main.rs`'s folder) holding its TensorProto.
    pub values: &'a [(String, String)],
    /// The plan.
    pub plan: &'a Plan,
    /// Kernels linked in: node, key, symbol.
    pub kernels: &'a [(String, u64, String)],
    /// The object's Rust items, which declare and table its kernels as `LINKED` ([`crate::ObjectCode::items`]).
    pub items: Option<&'a str>,
    /// Where the kinds of the target list are found.
    pub kinds: &'a [crate::KindSource],
    /// The embedded files are in `OUT_DIR` (a build.rs module), not beside `src/` (an executable's crate).
    pub in_out_dir: bool,
    /// The plan's memory path, in words.
    pub path: &'a str,
    /// The other path's plan (OpenCL built on a unified device: the staging plan): its path and copies (the plan
    /// itself, written out, is embedded from a file of its own, as the plan is).
    pub other: Option<(&'a str, &'a [String])>,
    /// The model's declared inputs.
    pub inputs: &'a [String],
    /// Bytes of `constants.bin`.
    pub constants_len: usize,
    /// A digest of `constants.bin`.
    pub constants_hash: u64,
    /// For a model compiled in stages (`staged.rs`): the cuts, outermost first, and one line per cut.
    pub staged: Option<(&'a [usize], Vec<String>)>,
}

fn option(v: Option<usize>) -> TokenStream {
    match v {
        Some(n) => {
            let n = Literal::usize_unsuffixed(n);
            quote!(Some(#n))
        }
        None => quote!(None),
    }
}

fn pairs(p: &[(String, String)]) -> TokenStream {
    let items = p.iter().map(|(a, b)| quote!((#a, #b)));
    quote!(&[#(#items),*])
}

/// The plan in a few lines, for the module's documentation.
pub(super) fn summary(s: &Source<'_>) -> Vec<String> {
    let plan = s.plan;
    let mut lines = vec![
        format!("`{}` compiled by stowage for `{}`.", s.model_name, s.options.target),
        String::new(),
        "Placement:".to_string(),
        String::new(),
    ];
    for (i, t) in plan.targets.iter().enumerate() {
        let n = plan.nodes.iter().filter(|p| p.target == i).count();
        if n > 0 {
            lines.push(format!("- {n} nodes on `{}` (memory `{}`)", t.name, t.space));
        }
    }
    let per_run: Vec<_> = plan.run_copies().collect();
    let bytes: usize = per_run.iter().map(|c| c.bytes).sum();
    lines.push(String::new());
    lines.push(format!("Memory path: {}.", s.path));
    if let Some((path, _)) = s.other {
        lines.push(format!("Also built: the plan for {path} (`OTHER_COPIES`), taken when the device opened is so."));
    }
    lines.push(String::new());
    lines.push(format!("Copies per run: {}, {bytes} bytes; all of them are listed in `COPIES`.", per_run.len()));
    let setup = plan.copies.iter().filter(|c| c.when == When::Setup).count();
    if setup > 0 {
        lines.push(format!("Constants uploaded once at setup: {setup}."));
    }
    if let Some((_, cuts)) = &s.staged {
        lines.push(String::new());
        lines.push(
            "Compiled in stages: what is above is the part that runs first, built ahead of time; the rest is \
             compiled when a run reaches it, for the shapes that came:"
                .to_string(),
        );
        lines.push(String::new());
        lines.extend(cuts.iter().map(|l| format!("- {l}")));
    }
    lines.push(String::new());
    lines.push("Memory:".to_string());
    lines.push(String::new());
    for a in &plan.arenas {
        lines.push(format!(
            "- `{}`: peak {} bytes, lower bound {} bytes, {} buffers",
            a.space,
            a.peak_bytes,
            a.lower_bound_bytes,
            a.buffers.len()
        ));
    }
    lines
}

/// The backend's declarations and table of the kernels linked in (`LINKED`), and the kinds of the targets
/// (`KINDS`).
pub(super) fn kernel_items(s: &Source<'_>) -> Result<TokenStream, String> {
    let linked = match s.items {
        Some(items) => {
            items.parse::<TokenStream>().map_err(|e| format!("a backend's kernel table does not parse: {e}"))?
        }
        None => TokenStream::new(),
    };
    let kinds = s
        .kinds
        .iter()
        .map(|k| k.path.parse::<TokenStream>().map_err(|e| format!("the kind path '{}' does not parse: {e}", k.path)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(quote! {
        #linked

        /// The kinds of the targets it was built for.
        static KINDS: &[&dyn ::stowage_driver::TargetKind] = &[#(&#kinds),*];
    })
}

/// `COPIES` and `PLAN` (and `OTHER_COPIES` and `OTHER_PLAN`, the other path's plan): every copy, one line each
/// with its reason, and the plan written out, which the built code runs as it is.
/// `plan_file` and `other_file` name the files the plans are embedded from.
pub(super) fn copies_items(
    s: &Source<'_>,
    public: bool,
    plan_file: TokenStream,
    other_file: TokenStream,
) -> TokenStream {
    let vis = if public { quote!(pub) } else { quote!() };
    let copies = s.plan.copies.iter().map(|c| c.to_string());
    let doc = format!(
        " Every copy the plan makes ({}), one line each: what moves, from where to where, how many bytes, when, \
         and why. The code runs this plan (`PLAN`) on the targets it was made for, or `OTHER_COPIES`'s where \
         there is one; other targets are refused.",
        s.path
    );
    let mut items = quote! {
        #[doc = #doc]
        #vis static COPIES: &[&str] = &[#(#copies),*];
        /// The plan, written out (`stowage_compiler::plan::serial`): placement, layouts, copies and arenas.
        static PLAN: &[u8] = include_bytes!(#plan_file);
    };
    if let Some((path, other)) = s.other {
        let doc = format!(" The plan a discrete device takes instead ({path}), one copy per line.");
        items.extend(quote! {
            #[doc = #doc]
            #vis static OTHER_COPIES: &[&str] = &[#(#other),*];
            /// That plan, written out.
            static OTHER_PLAN: &[u8] = include_bytes!(#other_file);
        });
    }
    items
}

/// `GRAPH` and `constants()`: the optimised graph, and its constants embedded page-aligned by the assembler
/// (`.incbin`, so a blob of hundreds of megabytes costs the compiler nothing), from `graph_file` and
/// `constants_file` (absolute paths as macros build them). `symbol` names the blob.
pub(super) fn graph_items(
    s: &Source<'_>,
    graph_file: TokenStream,
    constants_file: TokenStream,
    symbol: &str,
) -> TokenStream {
    let len = Literal::usize_unsuffixed(s.constants_len);
    let ident = format_ident!("{}", symbol);
    let globl = format!(".globl {symbol}");
    let label = format!("{symbol}:");
    let hash = Literal::u64_unsuffixed(s.constants_hash);
    quote! {
        /// The optimised graph (`stowage_compiler::ir::serial`): weights folded, every op's attributes resolved.
        static GRAPH: &[u8] = include_bytes!(#graph_file);

        std::arch::global_asm!(
            ".pushsection .rodata.stowage_constants,\"a\",@progbits",
            ".balign 4096",
            #globl,
            #label,
            concat!(".incbin \"", #constants_file, "\""),
            ".popsection",
        );

        extern "C" {
            /// The graph's constants, packed row-major, each at a 256-byte boundary of this page-aligned blob.
            static #ident: [u8; #len];
        }

        /// A digest of the constants, so that this file changes (and is compiled again) when they do.
        const CONSTANTS_DIGEST: u64 = #hash;

        /// The constants blob.
        fn constants() -> &'static [u8] {
            let _ = CONSTANTS_DIGEST;
            unsafe { &#ident }
        }
    }
}

/// `Built { … }` for what `s` describes, naming the statics `GRAPH`, `CONSTANTS`, `COPIES`, `KINDS` and `LINKED`;
/// `staged_file` is the embedded model of a model compiled in stages.
pub(super) fn built_literal(s: &Source<'_>, staged_file: TokenStream) -> TokenStream {
    let options = s.options;
    let model_name = s.model_name;
    let target = &options.target;
    let shapes = options.config.input_shapes.iter().map(|(name, dims)| {
        let dims = dims.iter().map(|&d| Literal::usize_unsuffixed(d));
        quote!((#name, &[#(#dims),*]))
    });
    let values = s.values.iter().map(|(name, file)| {
        if s.in_out_dir {
            let path = format!("/{file}");
            quote!((#name, include_bytes!(concat!(env!("OUT_DIR"), #path))))
        } else {
            let path = format!("../{file}");
            quote!((#name, include_bytes!(#path)))
        }
    });
    let layouts = pairs(&options.planning.input_layouts);
    let states = pairs(&options.planning.states);
    let (max_copies, max_bytes) = (option(options.planning.max_copies), option(options.planning.max_copy_bytes));
    let path = s.path;
    let inputs = s.inputs.iter();
    let other = match s.other {
        Some((p, _)) => quote!(Some((#p, OTHER_COPIES, OTHER_PLAN))),
        None => quote!(None),
    };
    let linked = if s.items.is_some() { quote!(Some(&LINKED)) } else { quote!(None) };
    let staged = match &s.staged {
        Some((cuts, _)) => {
            let cuts = cuts.iter().map(|&c| Literal::usize_unsuffixed(c));
            quote!(Some(::stowage_driver::exe::Staged { model: include_bytes!(#staged_file), cuts: &[#(#cuts),*] }))
        }
        None => quote!(None),
    };
    quote! {
        ::stowage_driver::exe::Built {
            model_name: #model_name,
            graph: GRAPH,
            constants,
            inputs: &[#(#inputs),*],
            target: #target,
            input_shapes: &[#(#shapes),*],
            input_values: &[#(#values),*],
            input_layouts: #layouts,
            states: #states,
            max_copies: #max_copies,
            max_copy_bytes: #max_bytes,
            path: #path,
            copies: COPIES,
            plan: PLAN,
            other: #other,
            kinds: KINDS,
            linked: #linked,
            staged: #staged,
        }
    }
}

/// Formats generated code with prettyplease, its doc comments escaped to printable ASCII first
/// ([`super::names::escape_docs`]). Comments do not survive a token stream, so the one `unsafe` block of generated
/// code gets its `// SAFETY:` line here.
pub(super) fn unparse(file: TokenStream, what: &str) -> Result<String, String> {
    let mut parsed: syn::File = syn::parse2(file).map_err(|e| format!("generated {what} does not parse: {e}"))?;
    super::names::escape_docs(&mut parsed);
    let text = prettyplease::unparse(&parsed);
    Ok(text.replace(
        "    unsafe { &stowage_",
        "    // SAFETY: the symbol is defined by the `global_asm!` above: that many bytes of read-only data.\n    unsafe { &stowage_",
    ))
}

/// The generated `main.rs`.
pub fn main_rs(s: &Source<'_>) -> Result<String, String> {
    let docs = summary(s).into_iter().map(|l| {
        let l = if l.is_empty() { l } else { format!(" {l}") };
        quote!(#![doc = #l])
    });
    let kernels = kernel_items(s)?;
    let built = built_literal(s, quote!("../staged.onnx"));
    let copies = copies_items(s, false, quote!("../plan.bin"), quote!("../other_plan.bin"));
    let graph = graph_items(
        s,
        quote!("../graph.bin"),
        quote!(concat!(env!("CARGO_MANIFEST_DIR"), "/constants.bin")),
        "stowage_constants",
    );
    let file = quote! {
        #(#docs)*

        #graph

        #kernels

        #copies

        static BUILT: ::stowage_driver::exe::Built = #built;

        fn main() -> ::std::process::ExitCode {
            ::stowage_driver::exe::main(&BUILT)
        }
    };
    let header = format!(
        "// @generated by stowage {} (`stowage build`) from {}. Do not edit: build again instead.\n",
        env!("CARGO_PKG_VERSION"),
        super::names::comment(s.model_name)
    );
    Ok(header + &unparse(file, "source")?)
}
