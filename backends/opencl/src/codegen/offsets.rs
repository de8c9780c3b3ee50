//! Buffer arguments as a base and a byte offset: every kernel reaches a value placed in the session's arena through
//! the arena's one `cl_mem` and the value's offset in it, not through a sub-buffer of its own.
//!
//! Why: NVIDIA's OpenCL charges host time at every launch for each sub-buffer among a kernel's arguments (SqueezeNet
//! on the H200: 1.32–1.75 ms a run with a sub-buffer per value against 0.77–0.80 ms with a buffer per value, the same
//! device time). With a base and an offset, a launch on the arena costs what a launch on own buffers costs.
//!
//! The rules, each tied to code:
//! 1. **Every `__global` parameter becomes two.** `__global [const] T* [restrict] X` is rewritten by
//!    [`with_offsets`] to `__global [const] T* [restrict] X__b, const ulong X__o`, and the body starts with
//!    `__global [const] T* [restrict] X = (…)((__global [const] uchar*)X__b + X__o);`, so the generators' bodies are
//!    unchanged. Programs are rewritten when built ([`crate::Target::program`]), so no generator can forget it.
//! 2. **A launch passes the pair.** [`crate::Target::launch`] sets a buffer argument as its allocation's root (the
//!    arena for a region, else itself) and its byte offset in it ([`crate::ClBuffer`]'s `kernel_arg`); argument
//!    indices count two per buffer.
//! 3. **Offsets keep alignment.** A region's offset is a multiple of the device's base alignment (`region` checks
//!    it), itself a multiple of every element size, so the rewritten pointer is aligned for `T` and its vectors.
//! 4. **A parameter it cannot read is an error**, naming the kernel and the parameter, never a silent mismatch
//!    between the kernel's signature and the arguments a launch sets.

use std::fmt::Write as _;

/// Why a kernel source could not be rewritten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kernel '{kernel}': cannot read the parameter '{param}' as `__global [const] T* [restrict] NAME`")]
pub struct OffsetError {
    /// The kernel.
    pub kernel: String,
    /// The parameter, as written.
    pub param: String,
}

/// A `__global` pointer parameter, read from its text.
struct Pointer<'a> {
    constant: bool,
    ty: &'a str,
    restrict: bool,
    name: &'a str,
}

fn pointer(param: &str) -> Option<Pointer<'_>> {
    let rest = param.strip_prefix("__global")?;
    let mut words = rest.split(|c: char| c.is_whitespace() || c == '*').filter(|w| !w.is_empty()).peekable();
    let constant = words.next_if_eq(&"const").is_some();
    let ty = words.next()?;
    let restrict = words.next_if_eq(&"restrict").is_some();
    let name = words.next()?;
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let one_star = rest.matches('*').count() == 1 && rest.find('*') < rest.rfind(name);
    (one_star && words.next().is_none() && ident(ty) && ident(name)).then_some(Pointer { constant, ty, restrict, name })
}

/// `source` with every kernel's `__global` parameters split into a base and a byte offset (rule 1).
pub fn with_offsets(source: &str) -> Result<String, OffsetError> {
    const HEAD: &str = "__kernel";
    let mut out = String::with_capacity(source.len() + source.len() / 4);
    let mut rest = source;
    while let Some(at) = rest.find(HEAD) {
        let after = &rest[at + HEAD.len()..];
        // `__kernel void NAME(PARAMS) {`, with no parenthesis inside PARAMS: anything else is refused (rule 4),
        // never passed over, so no kernel keeps parameters its launches would not match.
        let unread = |what: &str| OffsetError { kernel: after.chars().take(60).collect(), param: what.into() };
        let (Some(open), Some(close), Some(body)) = (after.find('('), after.find(')'), after.find('{')) else {
            return Err(unread("(a signature without parameters or body)"));
        };
        let head = after[..open].trim();
        let ordered = open < close && close < body && after[close + 1..body].trim().is_empty();
        if !ordered || head.strip_prefix("void").is_none() {
            return Err(unread("(not `__kernel void NAME(...) {`)"));
        }
        let kernel = head.trim_start_matches("void").trim();
        out.push_str(&rest[..at + HEAD.len()]);
        out.push_str(&after[..=open]);
        let mut prologue = String::new();
        let mut params = Vec::new();
        for param in after[open + 1..close].split(',').map(str::trim) {
            if !param.contains("__global") {
                params.push(param.to_string());
                continue;
            }
            let p =
                pointer(param).ok_or_else(|| OffsetError { kernel: kernel.to_string(), param: param.to_string() })?;
            let (c, r) = (if p.constant { "const " } else { "" }, if p.restrict { " restrict" } else { "" });
            params.push(format!("__global {c}{}*{r} {}__b, const ulong {}__o", p.ty, p.name, p.name));
            let _ = writeln!(
                prologue,
                "  __global {c}{ty}*{r} {n} = (__global {c}{ty}*)((__global {c}uchar*){n}__b + {n}__o);",
                ty = p.ty,
                n = p.name
            );
        }
        out.push_str(&params.join(", "));
        out.push_str(&after[close..=body]);
        out.push('\n');
        out.push_str(&prologue);
        rest = &after[body + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_parameters_become_a_base_and_an_offset() {
        let src =
            "__kernel void k(__global const float* restrict X, int n, __global long* restrict I) {\n  I[0] = n;\n}\n";
        let out = with_offsets(src).expect("rewrites");
        assert!(
            out.starts_with(
                "__kernel void k(__global const float* restrict X__b, const ulong X__o, int n, __global long* \
                 restrict I__b, const ulong I__o) {\n"
            ),
            "{out}"
        );
        assert!(out.contains(
            "  __global const float* restrict X = (__global const float*)((__global const uchar*)X__b + X__o);\n"
        ));
        assert!(out.contains("  __global long* restrict I = (__global long*)((__global uchar*)I__b + I__o);\n"));
        assert!(out.ends_with("  I[0] = n;\n}\n"), "{out}");
    }

    #[test]
    fn every_kernel_of_a_program_is_rewritten_and_other_text_kept() {
        let src = "#define A 1\n__kernel void a(__global float *y) { y[0] = A; }\nstatic int f(int x) { return x; }\n\
                   __kernel void b(__global float* z, float s) { z[0] = s; }\n";
        let out = with_offsets(src).expect("rewrites");
        assert_eq!(out.matches("__o").count(), 4, "{out}");
        assert!(out.starts_with("#define A 1\n__kernel void a(__global float* y__b, const ulong y__o) {\n"));
        assert!(out.contains("static int f(int x) { return x; }"));
        assert!(out.contains("__kernel void b(__global float* z__b, const ulong z__o, float s) {\n"));
    }

    #[test]
    fn a_parameter_it_cannot_read_names_the_kernel() {
        let err = with_offsets("__kernel void k(__global float** p) { }").expect_err("refused");
        assert_eq!(err, OffsetError { kernel: "k".into(), param: "__global float** p".into() });
        assert!(err.to_string().contains("kernel 'k'"));
        let err = with_offsets("__kernel void k(const __global float* p) { }").expect_err("refused");
        assert_eq!(err.param, "const __global float* p");
        // A kernel the rewrite cannot read at all is refused too, not passed over.
        for src in ["__kernel  __attribute__((x)) void k(__global float* p) { }", "__kernel void k(__global float* p)"]
        {
            assert!(with_offsets(src).is_err(), "{src}");
        }
    }
}
