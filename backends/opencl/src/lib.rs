//! stowage's OpenCL backend.
//!
//! Empty until the OpenCL backend issue lands; see ARCHITECTURE.md for what goes here.
