//! Collects every error of one derive, so the user sees all bad attributes at once.

use std::cell::RefCell;
use std::fmt::Display;

use quote::ToTokens;

/// Errors found so far. Consumed by [`Ctxt::check`].
#[derive(Default)]
pub struct Ctxt {
    errors: RefCell<Vec<syn::Error>>,
}

impl Ctxt {
    /// Report `message` at the tokens of `at`.
    pub fn error_at(&self, at: impl ToTokens, message: impl Display) {
        self.errors.borrow_mut().push(syn::Error::new_spanned(at.into_token_stream(), message));
    }

    /// Report an error syn already built.
    pub fn syn_error(&self, error: syn::Error) {
        self.errors.borrow_mut().push(error);
    }

    /// All errors folded into one, or `Ok` when there were none.
    pub fn check(self) -> syn::Result<()> {
        let mut errors = self.errors.into_inner().into_iter();
        let Some(mut first) = errors.next() else { return Ok(()) };
        for error in errors {
            first.combine(error);
        }
        Err(first)
    }
}
