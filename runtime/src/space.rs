//! Memory spaces: where a tensor's bytes can be.

use std::borrow::Cow;
use std::fmt;

/// How the host reaches a memory space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Ordinary host memory.
    Host,
    /// Device memory the host reaches only through transfers (a discrete GPU).
    Device,
    /// Device memory that is host memory too (an integrated GPU, PoCL): mapping is a pointer.
    Unified,
}

/// A named memory space: `host`, `opencl:0`, `test:discrete`.
///
/// The name is what plans, ledgers and reports print; the kind is what the runtime acts on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemorySpace {
    name: Cow<'static, str>,
    kind: MemoryKind,
}

impl MemorySpace {
    /// Host memory.
    pub const HOST: MemorySpace = MemorySpace { name: Cow::Borrowed("host"), kind: MemoryKind::Host };

    /// A device memory space with a fixed name.
    pub const fn device(name: &'static str, kind: MemoryKind) -> Self {
        MemorySpace { name: Cow::Borrowed(name), kind }
    }

    /// A device memory space whose name is only known at run time (`opencl:1`).
    pub fn named(name: impl Into<String>, kind: MemoryKind) -> Self {
        MemorySpace { name: Cow::Owned(name.into()), kind }
    }

    /// The printed name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the host reaches it.
    pub fn kind(&self) -> MemoryKind {
        self.kind
    }

    /// True for host memory.
    pub fn is_host(&self) -> bool {
        self.kind == MemoryKind::Host
    }
}

impl fmt::Display for MemorySpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}
