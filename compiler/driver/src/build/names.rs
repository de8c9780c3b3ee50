//! Model-controlled text in generated Rust. A model's file, graph, node, input and output names reach generated
//! code in three ways only, and each is closed to injection:
//!
//! - in string literals, written by `quote` (`proc_macro2::Literal`), which escapes them;
//! - as identifiers, made by [`Idents`]: nothing but `[A-Za-z_][A-Za-z0-9_]*`, never a keyword, never one already
//!   taken in its namespace;
//! - in comments: every `#[doc]` of the generated file is rewritten by [`escape_docs`], and the `//` header by
//!   [`comment`], to printable ASCII on one line (anything else as a `\u{…}` escape), so no name ends a comment,
//!   opens one, or carries a CR or a bidirectional override that rustc refuses.

use std::collections::HashSet;

use proc_macro2::Ident;
use syn::visit_mut::VisitMut;

/// Rust's keywords, strict and reserved, of every edition, and `_`: none can be a plain identifier.
const KEYWORDS: &[&str] = &[
    "_", "Self", "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate", "do",
    "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "macro",
    "match", "mod", "move", "mut", "override", "priv", "pub", "ref", "return", "self", "static", "struct", "super",
    "trait", "true", "try", "type", "typeof", "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// Identifiers made from names are cut to this many characters (a 10,000-character name makes a short one; two
/// names that agree this far are told apart by [`Idents`]' suffix).
const MAX_IDENT: usize = 64;

/// `text` as printable ASCII on one line: other characters (newlines, CR, U+202E, any non-ASCII) and `\` as
/// Rust-style escapes (`\n`, `\r`, `\t`, `\\`, `\u{202e}`).
pub fn comment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            _ => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    out
}

/// Rewrites every `#[doc = "…"]` and `#![doc = "…"]` of `file` through [`comment`], the generated code's own
/// and those of a backend's items alike.
pub fn escape_docs(file: &mut syn::File) {
    struct Docs;
    impl VisitMut for Docs {
        fn visit_attribute_mut(&mut self, attr: &mut syn::Attribute) {
            if let syn::Meta::NameValue(nv) = &mut attr.meta {
                if nv.path.is_ident("doc") {
                    if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = &mut nv.value {
                        *s = syn::LitStr::new(&comment(&s.value()), s.span());
                    }
                }
            }
        }
    }
    Docs.visit_file_mut(file);
}

/// A graph name as a snake-case identifier, not deduplicated: lowercase ASCII letters, digits and `_`, cut to
/// [`MAX_IDENT`] characters, with `v_` in front when it would be empty, start with a digit or be a keyword.
pub fn snake(name: &str) -> String {
    let mut s: String = name
        .chars()
        .take(MAX_IDENT)
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) || KEYWORDS.contains(&s.as_str()) {
        s.insert_str(0, "v_");
    }
    s
}

/// A graph name as a camel-case identifier, not deduplicated: `data_0` → `Data0`, with `V` in front when it would
/// be empty or a keyword.
pub fn camel(name: &str) -> String {
    let s: String =
        snake(name).split('_').filter(|p| !p.is_empty()).map(|p| p[..1].to_ascii_uppercase() + &p[1..]).collect();
    if s.is_empty() || KEYWORDS.contains(&s.as_str()) {
        format!("V{s}")
    } else {
        s
    }
}

/// The identifiers of one namespace of generated code: each name made into one ([`snake`] or [`camel`]) that no
/// other name of the namespace, and no reserved word of the generated code, has taken (`_2`, `_3`, … otherwise).
pub struct Idents {
    taken: HashSet<String>,
}

impl Idents {
    /// A namespace in which the generated code already uses `reserved`.
    pub fn new(reserved: &[&str]) -> Idents {
        Idents { taken: reserved.iter().map(|s| s.to_string()).collect() }
    }

    /// `name` as a snake-case identifier of this namespace.
    pub fn snake(&mut self, name: &str) -> Ident {
        self.unique(snake(name))
    }

    /// `name` as a camel-case identifier of this namespace.
    pub fn camel(&mut self, name: &str) -> Ident {
        self.unique(camel(name))
    }

    fn unique(&mut self, base: String) -> Ident {
        let mut ident = base.clone();
        let mut k = 2;
        while !self.taken.insert(ident.clone()) {
            ident = format!("{base}_{k}");
            k += 1;
        }
        Ident::new(&ident, proc_macro2::Span::call_site())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_plain_ident(s: &str) -> bool {
        s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !KEYWORDS.contains(&s)
    }

    #[test]
    fn identifiers_are_plain_ascii_never_keywords_and_never_twice() {
        let hostile = [
            "", "_", "__", "0x", "fn", "Self", "self", "type", "a\nb", "a\rb", "\"#", "*/", "\u{202e}", "日本",
            "data_0", "data-0", "DATA_0",
        ];
        let long = "n".repeat(10_000);
        let mut snakes = Idents::new(&[]);
        let mut camels = Idents::new(&["Model", "Outputs"]);
        let mut seen = (HashSet::new(), HashSet::new());
        for name in hostile.iter().copied().chain([long.as_str(), long.as_str(), "model", "outputs"]) {
            let (a, b) = (snakes.snake(name).to_string(), camels.camel(name).to_string());
            assert!(is_plain_ident(&a) && a.len() <= MAX_IDENT + 6, "{name:?} -> {a:?}");
            assert!(is_plain_ident(&b) && b.len() <= MAX_IDENT + 6, "{name:?} -> {b:?}");
            assert!(seen.0.insert(a.clone()), "{a} twice");
            assert!(seen.1.insert(b.clone()) && b != "Model" && b != "Outputs", "{b} twice or reserved");
        }
        // Ordinary names keep their familiar forms.
        assert_eq!((snake("data_0"), camel("data_0")), ("data_0".to_string(), "Data0".to_string()));
        assert_eq!((snake("fn"), camel("self"), camel("__")), ("v_fn".into(), "VSelf".into(), "V".into()));
    }

    #[test]
    fn comments_are_printable_ascii_on_one_line() {
        let text = comment("m\r\n*/ \"# \u{202e}fn\\ é");
        assert_eq!(text, "m\\r\\n*/ \"# \\u{202e}fn\\\\ \\u{e9}");
        assert!(text.chars().all(|c| (' '..='~').contains(&c)));
        let mut file: syn::File = syn::parse_quote! {
            #![doc = " a\nb"]
            #[doc = " c\u{202e}"]
            fn f() {}
        };
        escape_docs(&mut file);
        let text = prettyplease::unparse(&file);
        assert_eq!(text, "//! a\\nb\n/// c\\u{202e}\nfn f() {}\n");
    }
}
