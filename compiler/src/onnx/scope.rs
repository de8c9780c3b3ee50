//! The names in scope while a graph is imported: tensors (graph values) and, beside them, the sequences and
//! optionals that live only at import ([`super::structure`], rule 1), each a structure of graph values.
//!
//! `Scope` reads as the map of tensor names it holds (`Deref`), so code that meets only tensors reads it as before;
//! `contains_key` and `remove` cover both kinds of name, so that fresh names never collide with a sequence's and a
//! scope that ends takes its sequences with it.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};

use super::structure::Structure;
use crate::ir::ValueId;

/// A sequence or an optional in scope: its items are graph values.
pub(super) type Composite = Structure<ValueId>;

/// The names in scope: tensors, and composites beside them.
#[derive(Default)]
pub(super) struct Scope {
    tensors: HashMap<String, ValueId>,
    composites: HashMap<String, Composite>,
}

impl Deref for Scope {
    type Target = HashMap<String, ValueId>;
    fn deref(&self) -> &Self::Target {
        &self.tensors
    }
}

impl DerefMut for Scope {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tensors
    }
}

impl Scope {
    /// Whether `name` names a tensor or a composite.
    pub fn contains_key(&self, name: &str) -> bool {
        self.tensors.contains_key(name) || self.composites.contains_key(name)
    }

    /// Takes `name` out of scope, whichever kind it names; the tensor it named, if it named one.
    pub fn remove(&mut self, name: &str) -> Option<ValueId> {
        self.composites.remove(name);
        self.tensors.remove(name)
    }

    /// The composite `name` names, if it names one.
    pub fn composite(&self, name: &str) -> Option<&Composite> {
        self.composites.get(name)
    }

    /// What `name` names, as a structure: a tensor's value as `Structure::Tensor`.
    pub fn bound(&self, name: &str) -> Option<Composite> {
        match self.tensors.get(name) {
            Some(&v) => Some(Structure::Tensor(v)),
            None => self.composites.get(name).cloned(),
        }
    }

    /// Names `value` `name`: a tensor in the tensor map, anything else as a composite. Returns whether `name` was
    /// taken already (it is then named anew).
    pub fn bind(&mut self, name: String, value: Composite) -> bool {
        let taken = self.contains_key(&name);
        self.remove(&name);
        match value {
            Structure::Tensor(v) => {
                self.tensors.insert(name, v);
            }
            other => {
                self.composites.insert(name, other);
            }
        }
        taken
    }
}
